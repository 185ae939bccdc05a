//! The rest of a body the edge refused before reading it all (too large, or shed): read and
//! thrown away beside the answer, so the client gets the answer.

/// How much of a refused body (too large, or a shed request) is read and thrown away while the
/// answer goes out, and for how long at most. A client that writes its whole body before it
/// reads (httpx, the SDKs) would otherwise meet a closed socket, whose reset can destroy the
/// answer before it is read. Past either bound the connection closes (the answer is out by then).
/// (The router's hard ceiling on any body: nothing larger is read anyway.)
pub(crate) const REFUSED_DISCARD_BYTES: usize = 64 * 1024 * 1024;
pub(crate) const REFUSED_DISCARD_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Answers now and reads the rest of the refused body meanwhile, on a task of its own: the
/// connection stays readable for the client until the body ended (then it serves the next
/// request) or a bound passed (then it closes).
pub(crate) fn discard_in_background(
    body: axum::body::Body,
    max_bytes: usize,
    max_time: std::time::Duration,
) {
    tokio::spawn(discard_body(body, max_bytes, max_time));
}

/// Reads and discards what is left of a request body, up to `max_bytes` and `max_time`.
async fn discard_body(mut body: axum::body::Body, max_bytes: usize, max_time: std::time::Duration) {
    use http_body_util::BodyExt;
    let deadline = tokio::time::Instant::now() + max_time;
    let mut seen = 0usize;
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                seen += frame.data_ref().map_or(0, |d| d.len());
                if seen > max_bytes {
                    return;
                }
            }
            // The end, a broken body or the deadline.
            Ok(None) | Ok(Some(Err(_))) | Err(_) => return,
        }
    }
}
