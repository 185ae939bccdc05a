//! Server-Sent Events framing, incrementally: an upstream's `text/event-stream` body is cut into
//! events as its bytes arrive, so the gateway relays each one as soon as it is complete and
//! never holds more than one event in memory.
//!
//! The rules are the WHATWG "event stream interpretation": lines end in CRLF, LF or CR; a blank
//! line dispatches the event; `data:` lines join with `\n`; one space after the colon is
//! dropped; lines starting with `:` are comments; `retry:` takes only digits; an `id:` holding
//! NUL is ignored; an event left unterminated at the end of the stream is discarded.

use bytes::{Buf, Bytes, BytesMut};

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
    pub id: Option<String>,
    pub retry: Option<u64>,
}

impl SseEvent {
    pub fn message(data: String) -> SseEvent {
        SseEvent {
            data,
            ..SseEvent::default()
        }
    }

    /// The event as it goes on the wire to a client.
    pub fn encode(&self) -> Bytes {
        let mut out = String::with_capacity(self.data.len() + 32);
        if let Some(event) = &self.event {
            out.push_str("event: ");
            out.push_str(event);
            out.push('\n');
        }
        if let Some(id) = &self.id {
            out.push_str("id: ");
            out.push_str(id);
            out.push('\n');
        }
        if let Some(retry) = self.retry {
            out.push_str(&format!("retry: {retry}\n"));
        }
        for line in self.data.split('\n') {
            out.push_str("data: ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
        Bytes::from(out)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum SseError {
    /// One event grew past the limit before its blank line.
    EventTooLarge(usize),
}

/// Cuts a byte stream into events. Feed chunks with [`SseDecoder::push`], take events with
/// [`SseDecoder::next_event`] until it returns `None`, repeat.
pub struct SseDecoder {
    buf: BytesMut,
    current: SseEvent,
    has_data: bool,
    /// Bytes of the event being built (its lines so far plus what waits in `buf`).
    pending: usize,
    max_event: usize,
    /// The previous chunk ended in CR: an LF starting the next one belongs to that line end.
    skip_lf: bool,
    /// How much of `buf` is known to hold no line end (so a long line is scanned once).
    scanned: usize,
}

impl SseDecoder {
    pub fn new(max_event: usize) -> SseDecoder {
        SseDecoder {
            buf: BytesMut::new(),
            current: SseEvent::default(),
            has_data: false,
            pending: 0,
            max_event,
            skip_lf: false,
            scanned: 0,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event in what was pushed so far.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        loop {
            if self.skip_lf && !self.buf.is_empty() {
                if self.buf[0] == b'\n' {
                    self.buf.advance(1);
                }
                self.skip_lf = false;
            }
            let Some(end) = self.buf[self.scanned..]
                .iter()
                .position(|b| *b == b'\n' || *b == b'\r')
                .map(|i| i + self.scanned)
            else {
                if self.buf.is_empty() {
                    // Drained: an idle stream keeps no buffer (nor the chunk it came from).
                    self.buf = BytesMut::new();
                }
                self.scanned = self.buf.len();
                if self.pending + self.buf.len() > self.max_event {
                    return Err(SseError::EventTooLarge(self.max_event));
                }
                return Ok(None);
            };
            self.scanned = 0;
            let line = self.buf.split_to(end);
            let terminator = self.buf[0];
            self.buf.advance(1);
            if terminator == b'\r' {
                if self.buf.is_empty() {
                    self.skip_lf = true;
                } else if self.buf[0] == b'\n' {
                    self.buf.advance(1);
                }
            }
            self.pending += line.len() + 1;
            if self.pending > self.max_event {
                return Err(SseError::EventTooLarge(self.max_event));
            }
            if line.is_empty() {
                if let Some(event) = self.dispatch() {
                    return Ok(Some(event));
                }
                continue;
            }
            self.field(&line);
        }
    }

    fn field(&mut self, line: &[u8]) {
        if line[0] == b':' {
            return;
        }
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match name {
            b"data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(&value);
                self.has_data = true;
            }
            b"event" => self.current.event = Some(value.into_owned()),
            b"id" if !value.contains('\0') => self.current.id = Some(value.into_owned()),
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.current.retry = value.parse().ok();
            }
            _ => {}
        }
    }

    /// Ends the event being built. An event without data is not dispatched, but a `retry:` or
    /// `id:` it carried is still worth relaying, so it comes out with empty data.
    fn dispatch(&mut self) -> Option<SseEvent> {
        self.pending = 0;
        let event = std::mem::take(&mut self.current);
        let had_data = std::mem::take(&mut self.has_data);
        if had_data || event.retry.is_some() || event.id.is_some() {
            Some(event)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(decoder: &mut SseDecoder) -> Vec<SseEvent> {
        let mut out = Vec::new();
        while let Some(e) = decoder.next_event().unwrap() {
            out.push(e);
        }
        out
    }

    #[test]
    fn events_split_anywhere_come_out_whole() {
        let wire = b"event: message\r\nid: 7\r\nretry: 1500\r\ndata: {\"a\":\r\ndata:1}\r\n\r\n: ping\n\ndata: two\n\n";
        for cut in 0..wire.len() {
            let mut d = SseDecoder::new(1024);
            d.push(&wire[..cut]);
            let mut got = all(&mut d);
            d.push(&wire[cut..]);
            got.extend(all(&mut d));
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(got[0].data, "{\"a\":\n1}");
            assert_eq!(got[0].id.as_deref(), Some("7"));
            assert_eq!(got[0].retry, Some(1500));
            assert_eq!(got[0].event.as_deref(), Some("message"));
            assert_eq!(got[1].data, "two");
        }
    }

    #[test]
    fn cr_only_line_ends_and_unterminated_tail() {
        let mut d = SseDecoder::new(1024);
        d.push(b"data: a\r\rdata: b");
        assert_eq!(all(&mut d), vec![SseEvent::message("a".into())]);
    }

    #[test]
    fn a_drained_decoder_holds_no_buffer() {
        let mut d = SseDecoder::new(1024);
        d.push(b"data: a\n\n");
        assert_eq!(all(&mut d), vec![SseEvent::message("a".into())]);
        assert_eq!(d.buf.capacity(), 0);
        d.push(b"data: b");
        assert!(all(&mut d).is_empty());
        assert!(d.buf.capacity() > 0, "a partial line stays");
        d.push(b"\n");
        assert!(all(&mut d).is_empty());
        assert_eq!(d.buf.capacity(), 0, "a whole line is parsed out");
        d.push(b"\n");
        assert_eq!(all(&mut d), vec![SseEvent::message("b".into())]);
    }

    #[test]
    fn an_event_past_the_limit_is_an_error_not_a_buffer() {
        let mut d = SseDecoder::new(16);
        d.push(b"data: 0123456789abcdef0123");
        assert_eq!(d.next_event(), Err(SseError::EventTooLarge(16)));
    }

    #[test]
    fn encode_round_trips() {
        let event = SseEvent {
            event: Some("message".into()),
            data: "x\ny".into(),
            id: Some("3".into()),
            retry: Some(10),
        };
        let mut d = SseDecoder::new(1024);
        d.push(&event.encode());
        assert_eq!(all(&mut d), vec![event]);
    }
}
