//! One request to many shards at once: a test of hundreds of shards must not wait out one
//! slow shard's timeout after another within a reconcile.

use super::view::View;
use crate::names::SHARD_PORT;
use futures_util::StreamExt;
use std::future::Future;
use std::time::Duration;
use wsload_control::Token;
use wsload_control::client::ShardClient;
use wsload_http::http_client::Client;

/// Requests in flight at most.
const CONCURRENCY: usize = 32;

/// Calls `call` on every shard of `targets` (index, pod IP) through `http`, with the test's
/// `token`, at most [`CONCURRENCY`] at a time, `call` told which shard it calls (a request
/// whose body differs by shard: each one's release instant on its own clock); the answers by
/// shard index, in no particular order.
async fn each_indexed<T, F, Fut>(
    http: &Client,
    token: &Token,
    targets: &[(u32, String)],
    timeout: Duration,
    call: F,
) -> Vec<(u32, T)>
where
    F: Fn(u32, ShardClient) -> Fut,
    Fut: Future<Output = T>,
{
    // Futures built up front, owning what they need: a stream mapping borrowed items with a
    // closure makes the reconcile future's Send-ness depend on higher-ranked lifetimes the
    // compiler cannot prove.
    let calls: Vec<_> = targets
        .iter()
        .map(|(i, ip)| {
            let i = *i;
            let answer = call(
                i,
                ShardClient::with_http(http.clone(), ip, SHARD_PORT, token.clone(), timeout),
            );
            async move { (i, answer.await) }
        })
        .collect();
    bounded(calls).await
}

impl View<'_> {
    /// [`each_indexed`] over `targets` with this test's token, each call limited by the
    /// control timeout: every control order but the results' fetch.
    pub(super) async fn order_shards<T, F, Fut>(
        &self,
        targets: &[(u32, String)],
        call: F,
    ) -> Vec<(u32, T)>
    where
        F: Fn(u32, ShardClient) -> Fut,
        Fut: Future<Output = T>,
    {
        let timeout = self.ctx.config.control_timeout;
        each_indexed(&self.ctx.http, &self.token(), targets, timeout, call).await
    }
}

/// Runs `calls`, at most [`CONCURRENCY`] at a time; their outputs in completion order.
pub(super) async fn bounded<T, Fut>(calls: Vec<Fut>) -> Vec<T>
where
    Fut: Future<Output = T>,
{
    futures_util::stream::iter(calls)
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}
