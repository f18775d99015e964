//! A stream cut after its first content: through the gateway the client
//! must get the 200 and every byte the upstream delivered, then an error.
#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use http_body_util::BodyExt;
use llm_retry_mock::{Reply, Route};
use support::{client, gateway, no_env, one_target, post, target, PROMPT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cut_after_content_reaches_the_client_whole_then_fails() {
    let reply = Reply::anthropic_stream(&["H\u{e9}llo", " \u{1f980}"]);
    let full = reply.expected_body().unwrap();
    let delta = full
        .windows(26)
        .position(|w| w == b"event: content_block_delta")
        .unwrap();
    let content_end = delta + full[delta..].windows(2).position(|w| w == b"\n\n").unwrap() + 2;
    let mut bad = Vec::new();
    for n in content_end..full.len() {
        let upstream = target(Route::always(reply.clone().reset_after_bytes(n))).await;
        let mut gw = gateway(
            &one_target(&upstream.url(""), "", "max_retries = 0"),
            no_env,
        )
        .await;
        match client()
            .request(post(&gw.url("/v1/messages"), PROMPT))
            .await
        {
            Err(error) => bad.push(format!("cut {n}: no answer at all ({error:?})")),
            Ok(response) => {
                let status = response.status();
                let mut body = response.into_body();
                let mut read = Vec::new();
                let mut failed = false;
                while let Some(frame) = body.frame().await {
                    match frame {
                        Ok(frame) => read.extend_from_slice(frame.data_ref().unwrap()),
                        Err(_) => {
                            failed = true;
                            break;
                        }
                    }
                }
                if status != 200 || !failed || read != full[..n] {
                    bad.push(format!(
                        "cut {n}: status {status}, read {} of {n} bytes, ended in an error: {failed}",
                        read.len()
                    ));
                }
            }
        }
        assert_eq!(upstream.request_count(), 1, "never replayed");
        gw.signal();
        let _ = gw.served.await;
    }
    assert!(
        bad.is_empty(),
        "{} of {} cuts: {bad:#?}",
        bad.len(),
        full.len() - content_end
    );
}
