//! `adisk files-http` (hidden): the storage side of `adisk bench remote`'s peers — a plain
//! HTTP/1.1 file server (tower-http's `ServeDir`: HEAD, `Range`, `Last-Modified`, `ETag`) over
//! the Parquet files of a directory, so that DuckDB's httpfs and DataFusion's HTTP object
//! store read a disk's files from the disk's own machine. Only `*.parquet` paths are served
//! (a cluster directory also holds keys and certificates); everything else is 404.
use crate::common::CliError;
use std::path::Path;

/// Serves `root`'s Parquet files on `listen` until killed.
pub async fn serve(listen: &str, root: &Path) -> Result<(), CliError> {
    let fail = |e: std::io::Error| CliError::Other(format!("files-http on {listen}: {e}"));
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(fail)?;
    let dir = tower_http::services::ServeDir::new(root);
    loop {
        let (stream, _) = listener.accept().await.map_err(fail)?;
        let dir = dir.clone();
        let service = hyper::service::service_fn(move |req| {
            let mut dir = dir.clone();
            async move { dir.try_call(only_parquet(req)).await }
        });
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

/// `req`, or — when it does not ask for a `.parquet` file — the same request for a path that
/// cannot exist, which `ServeDir` answers 404.
fn only_parquet<B>(mut req: hyper::Request<B>) -> hyper::Request<B> {
    if !req.uri().path().ends_with(".parquet") {
        *req.uri_mut() = hyper::Uri::from_static("/not-served/.none");
    }
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_parquet_files_are_asked_for() {
        let ask = |p: &str| {
            only_parquet(hyper::Request::get(p).body(()).unwrap())
                .uri()
                .path()
                .to_string()
        };
        assert_eq!(ask("/disk-0/tables/a.parquet"), "/disk-0/tables/a.parquet");
        assert_eq!(ask("/cluster.key"), "/not-served/.none");
        assert_eq!(ask("/tls/ca.key"), "/not-served/.none");
    }
}
