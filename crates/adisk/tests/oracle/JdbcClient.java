// A JDBC client of `adisk serve`: the Arrow Flight SQL JDBC driver (org.apache.arrow:
// flight-sql-jdbc-driver) connects with a user and password, runs a query and a prepared
// statement, and prints each result's rows, one per line, cells separated by `|`.
// A refused login prints `refused: MESSAGE`. PARTS_SQL, a query whose result the server serves
// as one endpoint per disk (the driver reads each from its disk), prints `partitioned: ROWS|SUM`
// (the row count and the sum of its first column).
//
// usage: java --add-opens=java.base/java.nio=ALL-UNNAMED -cp DRIVER.jar JdbcClient.java HOST PORT USER PASSWORD SQL [BOUND_SQL VALUE [PARTS_SQL]]
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

public class JdbcClient {
    static void print(String label, ResultSet rs) throws SQLException {
        int columns = rs.getMetaData().getColumnCount();
        while (rs.next()) {
            StringBuilder row = new StringBuilder(label).append(": ");
            for (int c = 1; c <= columns; c++) {
                if (c > 1) row.append('|');
                row.append(rs.getString(c));
            }
            System.out.println(row);
        }
    }

    /** TLS with the CA in $ADISK_TLS_CA (the service's CA certificate, PEM), else plaintext. */
    static String encryption() {
        String ca = System.getenv("ADISK_TLS_CA");
        if (ca == null || ca.isEmpty()) return "useEncryption=false";
        return "useEncryption=true&tlsRootCerts=" + ca;
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:arrow-flight-sql://" + args[0] + ":" + args[1] + "/?" + encryption();
        Properties props = new Properties();
        props.setProperty("user", args[2]);
        props.setProperty("password", args[3]);
        Connection conn;
        try {
            conn = DriverManager.getConnection(url, props);
            // The driver logs in lazily on some versions: make it talk to the server now.
            conn.getMetaData().getDatabaseProductName();
        } catch (SQLException e) {
            System.out.println("refused: " + e.getMessage());
            return;
        }
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(args[4])) {
            print("query", rs);
        }
        if (args.length > 6) {
            try (PreparedStatement ps = conn.prepareStatement(args[5])) {
                ps.setLong(1, Long.parseLong(args[6]));
                try (ResultSet rs = ps.executeQuery()) {
                    print("prepared", rs);
                }
            }
        }
        if (args.length > 7) {
            long rows = 0, sum = 0;
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(args[7])) {
                while (rs.next()) {
                    rows++;
                    sum += rs.getLong(1);
                }
            }
            System.out.println("partitioned: " + rows + "|" + sum);
        }
        conn.close();
    }
}
