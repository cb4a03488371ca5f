//! Every server replica read in turn, one scrape of each replica's exposition, for the counters
//! the conductor reads beside the shards' figures (connections, topics). What a reading takes
//! from an exposition is its caller's; that a replica which cannot be scraped fails the whole
//! reading is this module's: a reading missing a replica would pass for a quiet replica.

use std::time::Duration;
use wsload_http::http_client::Client;
use wsload_http::scrape;

/// What `parse` finds in each replica's exposition at `urls` (with the replica's URL), in
/// order; `None` as soon as a replica has nothing for it (`parse` gives `None`), without
/// reading the rest.
pub async fn read<T>(
    http: &Client,
    urls: &[String],
    timeout: Duration,
    parse: impl Fn(&str, &str) -> Result<Option<T>, scrape::Error>,
) -> Result<Option<Vec<T>>, scrape::Error> {
    let mut each = Vec::with_capacity(urls.len());
    for url in urls {
        let body = scrape::fetch(http, url, timeout).await?;
        let Some(reading) = parse(url, &body)? else {
            return Ok(None);
        };
        each.push(reading);
    }
    Ok(Some(each))
}

/// [`read`] on the calling thread.
pub fn read_blocking<T>(
    urls: &[String],
    timeout: Duration,
    parse: impl Fn(&str, &str) -> Result<Option<T>, scrape::Error>,
) -> Result<Option<Vec<T>>, scrape::Error> {
    let mut each = Vec::with_capacity(urls.len());
    for url in urls {
        let body = scrape::fetch_blocking(url, timeout)?;
        let Some(reading) = parse(url, &body)? else {
            return Ok(None);
        };
        each.push(reading);
    }
    Ok(Some(each))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// A replica whose exposition is `body`, for one scrape.
    fn replica(body: &'static str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/metrics", listener.local_addr().expect("addr"));
        std::thread::spawn(move || {
            let Ok((mut conn, _)) = listener.accept() else {
                return;
            };
            let _ = conn.read(&mut [0u8; 1024]);
            let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            let _ = conn.write_all(format!("{answer}{body}").as_bytes());
        });
        url
    }

    /// An address nothing listens on: reading it fails.
    fn gone() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}/metrics", listener.local_addr().expect("addr"))
    }

    fn number(_: &str, body: &str) -> Result<Option<u64>, scrape::Error> {
        Ok(body.trim().parse().ok())
    }

    #[test]
    fn every_replica_in_order_until_one_has_nothing_and_a_replica_unread_fails_it() {
        let urls = [replica("1"), replica("2")];
        assert_eq!(
            read_blocking(&urls, TIMEOUT, number).expect("read"),
            Some(vec![1, 2])
        );
        // Nothing past the replica without a reading is scraped, not even one that is gone.
        let urls = [replica("none"), gone()];
        assert_eq!(read_blocking(&urls, TIMEOUT, number).expect("read"), None);
        let urls = [replica("1"), gone()];
        assert!(read_blocking(&urls, TIMEOUT, number).is_err());
    }
}
