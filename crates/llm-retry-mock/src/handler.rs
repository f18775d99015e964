//! Answers one request: read the body (capped), record, pick the reply,
//! wait, respond or reset.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http::{HeaderValue, Request, Response, Version};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::time::Instant;

use crate::body::{build_response, ReplyBody};
use crate::conn::ConnControl;
use crate::record::RecordedRequest;
use crate::reply::Reply;
use crate::server::Shared;

/// How much of an over-cap body is read and thrown away before the 413, so
/// the client is not still writing (and reset) when the answer comes.
const DRAIN_LIMIT: u64 = 64 * 1024 * 1024;

/// Why a request got no response.
#[derive(Debug)]
pub(crate) enum NoResponse {
    /// The reply was a reset.
    Reset,
    /// The request body failed (the client went away mid-upload).
    BrokenRequest,
}

impl fmt::Display for NoResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoResponse::Reset => f.write_str("llm-retry-mock: scripted reset"),
            NoResponse::BrokenRequest => f.write_str("llm-retry-mock: request body failed"),
        }
    }
}

impl Error for NoResponse {}

enum BodyRead {
    Complete,
    TooLarge,
    Broken,
}

/// The hyper service function.
pub(crate) async fn handle<B>(
    shared: Arc<Shared>,
    ctl: Arc<ConnControl>,
    req: Request<B>,
) -> Result<Response<ReplyBody>, NoResponse>
where
    B: Body<Data = Bytes> + Unpin,
{
    let received_at = Instant::now();
    let (parts, body) = req.into_parts();
    let cap = shared.router.max_request_body();
    let hint = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let (bytes, read) = read_body(body, cap, hint).await;
    let path = parts.uri.path().to_owned();
    // Slots under in-flight ceilings are held until the answer is over.
    let (reply, slots) = match read {
        BodyRead::Complete => {
            let (reply, slots) = shared.router.select(&path, &parts.headers, &bytes);
            (Some(reply), slots)
        }
        BodyRead::TooLarge => {
            let reply = shared.router.too_large();
            let reply = match parts.version {
                Version::HTTP_10 | Version::HTTP_11 => reply.header("connection", "close"),
                _ => reply,
            };
            (Some(reply), Vec::new())
        }
        BodyRead::Broken => (None, Vec::new()),
    };
    shared.records.push(RecordedRequest {
        method: parts.method,
        path,
        headers: parts.headers,
        body: bytes,
        received_at,
        reply: reply.clone(),
    });
    let Some(reply) = reply else {
        return Err(NoResponse::BrokenRequest);
    };
    match reply {
        Reply::ResetBeforeHeaders { delay } => {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            ctl.reset_now();
            drop(slots);
            Err(NoResponse::Reset)
        }
        Reply::Response(response) => {
            if !response.delay.is_zero() {
                tokio::time::sleep(response.delay).await;
            }
            // HTTP/1.0 has no chunked encoding: a cut body would be
            // close-delimited and look complete, so declare a length the cut
            // body can never reach.
            let declared = match (parts.version, response.reset_after) {
                (Version::HTTP_10, Some(_)) => Some(response.full_body().len().saturating_add(1)),
                _ => None,
            };
            let mut response = build_response(response, ctl, slots);
            if let Some(len) = declared {
                response
                    .headers_mut()
                    .insert(CONTENT_LENGTH, HeaderValue::from(len));
            }
            Ok(response)
        }
    }
}

/// Reads up to `cap` bytes; past the cap, drains (bounded) and reports
/// `TooLarge` with the first `cap` bytes.
async fn read_body<B>(mut body: B, cap: usize, hint: Option<usize>) -> (Bytes, BodyRead)
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut buf = BytesMut::with_capacity(hint.unwrap_or(0).min(cap));
    let mut drained: u64 = 0;
    let mut over = false;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return (buf.freeze(), BodyRead::Broken);
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if over {
            drained = drained.saturating_add(data.len() as u64);
            if drained > DRAIN_LIMIT {
                break;
            }
            continue;
        }
        let room = cap - buf.len();
        if data.len() > room {
            buf.extend_from_slice(&data[..room]);
            over = true;
        } else {
            buf.extend_from_slice(&data);
        }
    }
    let read = if over {
        BodyRead::TooLarge
    } else {
        BodyRead::Complete
    };
    (buf.freeze(), read)
}
