//! Server-sent events: encoding, the streaming response (optionally broken on purpose), and
//! the helpers that cut text into delta-sized pieces.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures_util::{StreamExt as _, stream};

/// Words per text delta.
const WORDS_PER_CHUNK: usize = 3;
/// Characters per JSON-argument piece (there are always at least two pieces).
const CHARS_PER_PIECE: usize = 24;
/// How long a broken stream waits before failing, so the events before it reach the client.
const BREAK_GRACE: Duration = Duration::from_millis(50);

pub struct Event {
    /// The `event:` line (OpenAI streams have none).
    pub name: Option<&'static str>,
    pub data: String,
}

impl Event {
    pub fn named(name: &'static str, data: &serde_json::Value) -> Self {
        Self {
            name: Some(name),
            data: data.to_string(),
        }
    }

    pub fn data(data: impl Into<String>) -> Self {
        Self {
            name: None,
            data: data.into(),
        }
    }

    fn encode(&self) -> Bytes {
        let mut out = String::with_capacity(self.data.len() + 32);
        if let Some(name) = self.name {
            out.push_str("event: ");
            out.push_str(name);
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&self.data);
        out.push_str("\n\n");
        Bytes::from(out)
    }
}

/// A `text/event-stream` response of `events`. With `break_after: Some(n)` only the first `n`
/// events are sent and the body then ends with an error, so the connection is cut without a
/// clean end (no final chunk).
pub fn response(events: Vec<Event>, break_after: Option<usize>) -> Response {
    let limit = break_after.unwrap_or(usize::MAX);
    let sent =
        stream::iter(events.into_iter().take(limit)).map(|e| Ok::<_, std::io::Error>(e.encode()));
    let body = match break_after {
        None => Body::from_stream(sent),
        Some(_) => Body::from_stream(sent.chain(stream::once(async {
            tokio::time::sleep(BREAK_GRACE).await;
            Err(std::io::Error::other("scripted stream break"))
        }))),
    };
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

/// `text` cut before every few words; the pieces concatenate back to `text` (none if empty).
pub fn word_chunks(text: &str) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut words = 0;
    let mut prev_space = true;
    for (i, ch) in text.char_indices() {
        let space = ch.is_whitespace();
        if prev_space && !space {
            if words == WORDS_PER_CHUNK {
                chunks.push(&text[start..i]);
                start = i;
                words = 0;
            }
            words += 1;
        }
        prev_space = space;
    }
    if start < text.len() {
        chunks.push(&text[start..]);
    }
    chunks
}

/// `s` cut into at least two pieces of roughly equal length (fewer only if `s` has fewer
/// than two characters); they concatenate back to `s`.
pub fn pieces(s: &str) -> Vec<&str> {
    let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
    let count = bounds
        .len()
        .div_ceil(CHARS_PER_PIECE)
        .max(2)
        .min(bounds.len());
    if count <= 1 {
        return vec![s];
    }
    let mut out = Vec::with_capacity(count);
    let mut start = 0;
    for k in 1..count {
        let end = bounds[k * bounds.len() / count];
        out.push(&s[start..end]);
        start = end;
    }
    out.push(&s[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_chunks_keep_the_text() {
        let t = "one two three four five six seven";
        let c = word_chunks(t);
        assert_eq!(c, vec!["one two three ", "four five six ", "seven"]);
        assert_eq!(c.concat(), t);
        assert!(word_chunks("").is_empty());
        assert_eq!(word_chunks("  lead"), vec!["  lead"]);
    }

    #[test]
    fn pieces_split_in_two_or_more() {
        assert_eq!(pieces("{}"), vec!["{", "}"]);
        let long = r#"{"file_path":"docs/a/very/long/path/name.txt","limit":10}"#;
        let p = pieces(long);
        assert!(p.len() >= 2);
        assert_eq!(p.concat(), long);
        assert_eq!(pieces("é€"), vec!["é", "€"]);
        assert_eq!(pieces("x"), vec!["x"]);
    }

    #[test]
    fn encodes_named_and_bare_events() {
        let e = Event::named("ping", &serde_json::json!({"type": "ping"}));
        assert_eq!(
            &e.encode()[..],
            b"event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
        assert_eq!(&Event::data("[DONE]").encode()[..], b"data: [DONE]\n\n");
    }
}
