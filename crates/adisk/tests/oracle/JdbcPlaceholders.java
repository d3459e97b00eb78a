// `?` parameters through the Arrow Flight SQL JDBC driver (org.apache.arrow:flight-sql-jdbc-driver)
// against `adisk serve`: prepared statements with one and two `?` of integer and string type
// print `LABEL: CELL|CELL…` (one line per row); the parameter count the driver learned from
// the server prints `parameters: N`; a statement refused prints `refused LABEL: MESSAGE`
// (a `?` with no value bound, a mix of `?` and `$n`).
//
// usage: java --add-opens=java.base/java.nio=ALL-UNNAMED -cp DRIVER.jar JdbcPlaceholders.java HOST PORT USER PASSWORD
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

public class JdbcPlaceholders {
    static final String ORDERS = "SELECT count(*) AS n, sum(o_totalprice) AS s FROM orders WHERE ";

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

    /// Prepares `sql`, binds `values` (Long or String) to its parameters 1, 2, … and prints
    /// the result, or the refusal.
    static void run(Connection conn, String label, String sql, Object... values) {
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            for (int i = 0; i < values.length; i++) {
                if (values[i] instanceof Long v) ps.setLong(i + 1, v);
                else ps.setString(i + 1, (String) values[i]);
            }
            try (ResultSet rs = ps.executeQuery()) {
                print(label, rs);
            }
        } catch (SQLException e) {
            refused(label, e);
        }
    }

    /// Prints `refused LABEL: MESSAGE / CAUSE / …` on one line.
    static void refused(String label, SQLException e) {
        StringBuilder why = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) why.append(t).append(" / ");
        System.out.println("refused " + label + ": " + why.toString().replace('\n', ' '));
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
        try (Connection conn = DriverManager.getConnection(url, props)) {
            run(conn, "one_integer", ORDERS + "o_custkey = ?", 370L);
            run(conn, "one_string", ORDERS + "o_orderstatus = ?", "F");
            run(conn, "two_integer_and_string", ORDERS + "o_custkey < ? AND o_orderpriority = ?", 500L, "1-URGENT");
            run(conn, "two_in_order", ORDERS + "o_orderkey >= ? AND o_orderkey < ?", 100L, 2000L);
            try (PreparedStatement ps = conn.prepareStatement(ORDERS + "o_custkey = ? AND o_orderstatus = ?")) {
                System.out.println("parameters: " + ps.getParameterMetaData().getParameterCount());
            }
            // The driver itself refuses to run with a parameter unset; a plain statement binds
            // none, so the server sees a `?` with no value.
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(ORDERS + "o_custkey = ?")) {
                print("unbound", rs);
            } catch (SQLException e) {
                refused("unbound", e);
            }
            run(conn, "mixed", ORDERS + "o_custkey = ? AND o_orderstatus = $2", 370L, "F");
            run(conn, "after_error", "SELECT 1 AS one");
        }
    }
}
