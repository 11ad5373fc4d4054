//! The proxy's clock fault: a node whose clock runs `rate` times as fast
//! as the client's, as far as locks can tell — the expiry a `SET … PX`
//! (or a plain acquire batched into one script call) asks for is divided
//! by `rate`, and the time `TIME` reports advances
//! `rate` times as fast from the first reading. Works on RESP as redis-rs
//! speaks it: requests are arrays of bulk strings; replies are read one
//! value at a time to pair each with its request.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// What a connection's two directions share: which replies answer a
/// `TIME`, in order.
#[derive(Debug, Default)]
pub(super) struct Pending(Mutex<VecDeque<bool>>);

/// The node time of the first `TIME` reply after the fault was set, in
/// microseconds: scaled time runs from there.
#[derive(Debug, Default)]
pub(super) struct Anchor(Mutex<Option<u128>>);

/// Rewrites one direction of one connection, frame by frame.
#[derive(Debug)]
pub(super) struct Framer {
    request: bool,
    rate: f64,
    buf: Vec<u8>,
    pending: Arc<Pending>,
    anchor: Arc<Anchor>,
    /// The stream is not RESP as expected: pass the rest through.
    raw: bool,
}

impl Framer {
    pub(super) fn new(
        request: bool,
        rate: f64,
        pending: Arc<Pending>,
        anchor: Arc<Anchor>,
    ) -> Self {
        Self {
            request,
            rate,
            buf: Vec::new(),
            pending,
            anchor,
            raw: false,
        }
    }

    /// The bytes to forward for `input`: every complete frame, rewritten;
    /// an incomplete one waits for more.
    pub(super) fn feed(&mut self, input: &[u8]) -> Vec<u8> {
        if self.raw {
            return input.to_vec();
        }
        self.buf.extend_from_slice(input);
        let mut out = Vec::new();
        loop {
            let frame = if self.request {
                self.request_frame()
            } else {
                self.reply_frame()
            };
            match frame {
                Frame::Complete(bytes) => out.extend(bytes),
                Frame::Incomplete => return out,
                Frame::Unknown => {
                    self.raw = true;
                    out.append(&mut self.buf);
                    return out;
                }
            }
        }
    }

    fn request_frame(&mut self) -> Frame {
        if self.buf.is_empty() {
            return Frame::Incomplete;
        }
        let Some((args, used)) = parse_command(&self.buf) else {
            return if self.buf[0] == b'*' {
                Frame::Incomplete
            } else {
                Frame::Unknown
            };
        };
        self.buf.drain(..used);
        let mut args = args;
        let name = args.first().map(|a| a.to_ascii_uppercase());
        let is_time = name.as_deref() == Some(b"TIME");
        if name.as_deref() == Some(b"SET") {
            for i in 3..args.len() {
                if args[i - 1].eq_ignore_ascii_case(b"PX") {
                    self.scale(&mut args[i]);
                }
            }
        }
        // Plain acquires batched into one script call (`batch.lua`): four
        // arguments an entry, the ttl third after an `a`.
        if let Some(argv) = batch_argv(&args) {
            for entry in (argv..args.len()).step_by(4) {
                if args[entry] == b"a" && entry + 2 < args.len() {
                    self.scale(&mut args[entry + 2]);
                }
            }
        }
        if let Ok(mut pending) = self.pending.0.lock() {
            pending.push_back(is_time);
        }
        Frame::Complete(encode_command(&args))
    }

    /// A ttl in ms, divided by the rate (at least 1).
    fn scale(&self, ttl: &mut Vec<u8>) {
        if let Some(ms) = std::str::from_utf8(ttl)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            let scaled = ((ms as f64) / self.rate).floor().max(1.0) as u64;
            *ttl = scaled.to_string().into_bytes();
        }
    }

    fn reply_frame(&mut self) -> Frame {
        let Some(used) = value_len(&self.buf, 0) else {
            return Frame::Incomplete;
        };
        let frame: Vec<u8> = self.buf.drain(..used).collect();
        if frame.first() == Some(&b'>') {
            return Frame::Complete(frame); // a push answers no request
        }
        let is_time = self
            .pending
            .0
            .lock()
            .ok()
            .and_then(|mut p| p.pop_front())
            .unwrap_or(false);
        if !is_time {
            return Frame::Complete(frame);
        }
        match parse_time(&frame) {
            Some(micros) => {
                let anchor = match self.anchor.0.lock() {
                    Ok(mut anchor) => *anchor.get_or_insert(micros),
                    Err(_) => micros,
                };
                let scaled = anchor + ((micros.saturating_sub(anchor)) as f64 * self.rate) as u128;
                let (secs, us) = (
                    (scaled / 1_000_000).to_string(),
                    (scaled % 1_000_000).to_string(),
                );
                Frame::Complete(
                    format!(
                        "*2\r\n${}\r\n{secs}\r\n${}\r\n{us}\r\n",
                        secs.len(),
                        us.len()
                    )
                    .into_bytes(),
                )
            }
            None => Frame::Complete(frame),
        }
    }
}

enum Frame {
    Complete(Vec<u8>),
    Incomplete,
    Unknown,
}

/// `\r\n`-terminated line starting at `at`: its content and the index after
/// the terminator.
/// Where ARGV starts if `args` call the batch script (EVALSHA of its hash,
/// EVAL of its text, or FCALL of its function).
fn batch_argv(args: &[Vec<u8>]) -> Option<usize> {
    let name = args.first()?.to_ascii_uppercase();
    let body = args.get(1)?;
    let batch = &*crate::node::BATCH;
    let is_batch = match &*name {
        b"EVALSHA" => body.eq_ignore_ascii_case(batch.script.get_hash().as_bytes()),
        b"EVAL" => body == batch.source.as_bytes(),
        b"FCALL" => body == batch.function.as_bytes(),
        _ => false,
    };
    if !is_batch {
        return None;
    }
    let keys: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
    Some(3 + keys)
}

fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], at + end + 2))
}

fn number(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// A command as an array of bulk strings, and the bytes it took.
fn parse_command(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    let (head, mut at) = line(buf, 0)?;
    let count = number(head.strip_prefix(b"*")?)?;
    let mut args = Vec::new();
    for _ in 0..count {
        let (head, next) = line(buf, at)?;
        let len = usize::try_from(number(head.strip_prefix(b"$")?)?).ok()?;
        let end = next + len;
        if buf.get(end..end + 2)? != b"\r\n" {
            return None;
        }
        args.push(buf[next..end].to_vec());
        at = end + 2;
    }
    Some((args, at))
}

fn encode_command(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend(format!("${}\r\n", arg.len()).into_bytes());
        out.extend(arg);
        out.extend(b"\r\n");
    }
    out
}

/// The length of the RESP2 / RESP3 value starting at `at`, if complete.
fn value_len(buf: &[u8], at: usize) -> Option<usize> {
    end_of_value(buf, at).map(|end| end - at)
}

fn end_of_value(buf: &[u8], at: usize) -> Option<usize> {
    let kind = *buf.get(at)?;
    let (head, next) = line(buf, at)?;
    let head = &head[1..];
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(next),
        b'$' | b'=' | b'!' => {
            let len = number(head)?;
            if len < 0 {
                return Some(next);
            }
            let end = next + usize::try_from(len).ok()?;
            (buf.len() >= end + 2).then_some(end + 2)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let count = number(head)?;
            if count < 0 {
                return Some(next);
            }
            let count = if matches!(kind, b'%' | b'|') {
                count * 2
            } else {
                count
            };
            let mut at = next;
            for _ in 0..count {
                at = end_of_value(buf, at)?;
            }
            // An attribute precedes the value it describes.
            if kind == b'|' {
                return end_of_value(buf, at);
            }
            Some(at)
        }
        _ => None,
    }
}

/// A `TIME` reply (two bulk strings) in microseconds.
fn parse_time(frame: &[u8]) -> Option<u128> {
    let (head, at) = line(frame, 0)?;
    if head != b"*2" {
        return None;
    }
    let mut values = Vec::new();
    let mut at = at;
    for _ in 0..2 {
        let (head, next) = line(frame, at)?;
        let len = usize::try_from(number(head.strip_prefix(b"$")?)?).ok()?;
        values.push(u128::try_from(number(frame.get(next..next + len)?)?).ok()?);
        at = next + len + 2;
    }
    Some(values[0] * 1_000_000 + values[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(rate: f64) -> (Framer, Framer) {
        let pending = Arc::new(Pending::default());
        let anchor = Arc::new(Anchor::default());
        (
            Framer::new(true, rate, pending.clone(), anchor.clone()),
            Framer::new(false, rate, pending, anchor),
        )
    }

    #[test]
    fn set_px_is_scaled_and_split_frames_wait() {
        let (mut requests, _) = pair(2.0);
        let cmd = encode_command(&[
            b"SET".to_vec(),
            b"k".to_vec(),
            b"v".to_vec(),
            b"NX".to_vec(),
            b"PX".to_vec(),
            b"1000".to_vec(),
        ]);
        let (a, b) = cmd.split_at(10);
        assert!(requests.feed(a).is_empty());
        let out = requests.feed(b);
        let (args, _) = parse_command(&out).expect("a command");
        assert_eq!(args[5], b"500");
    }

    #[test]
    fn batched_acquires_are_scaled_and_the_rest_pass() {
        let (mut requests, _) = pair(2.0);
        let batch = &*crate::node::BATCH;
        let hash = batch.script.get_hash().as_bytes().to_vec();
        let entries: [&[u8]; 8] = [b"a", b"t1", b"1000", b"", b"e", b"t2", b"1000", b""];
        let mut cmd = vec![
            b"EVALSHA".to_vec(),
            hash,
            b"2".to_vec(),
            b"k1".to_vec(),
            b"k2".to_vec(),
        ];
        cmd.extend(entries.iter().map(|a| a.to_vec()));
        let out = requests.feed(&encode_command(&cmd));
        let (args, _) = parse_command(&out).expect("a command");
        assert_eq!(args[7], b"500", "the acquire's ttl");
        assert_eq!(args[11], b"1000", "an extension is not modelled");
        // Another script's arguments are left alone.
        cmd[1] = b"0000".to_vec();
        let out = requests.feed(&encode_command(&cmd));
        let (args, _) = parse_command(&out).expect("a command");
        assert_eq!(args[7], b"1000");
    }

    #[test]
    fn time_replies_run_fast_from_the_first_and_others_pass() {
        let (mut requests, mut replies) = pair(2.0);
        let mut both = encode_command(&[b"PING".to_vec()]);
        both.extend(encode_command(&[b"TIME".to_vec()]));
        both.extend(encode_command(&[b"TIME".to_vec()]));
        requests.feed(&both);
        let time = |s: u64, us: u64| {
            let (s, us) = (s.to_string(), us.to_string());
            format!("*2\r\n${}\r\n{s}\r\n${}\r\n{us}\r\n", s.len(), us.len())
        };
        let mut input = b"+PONG\r\n".to_vec();
        input.extend(time(100, 0).into_bytes());
        input.extend(time(101, 500_000).into_bytes());
        let out = replies.feed(&input);
        let mut at = 0;
        let mut frames = Vec::new();
        while at < out.len() {
            let len = value_len(&out, at).expect("a value");
            frames.push(out[at..at + len].to_vec());
            at += len;
        }
        assert_eq!(frames[0], b"+PONG\r\n");
        assert_eq!(parse_time(&frames[1]), Some(100_000_000));
        // 1.5 s later on the node: 3 s later as reported.
        assert_eq!(parse_time(&frames[2]), Some(103_000_000));
    }

    #[test]
    fn nested_and_null_values_have_lengths() {
        assert_eq!(value_len(b"*2\r\n$-1\r\n*1\r\n:1\r\n", 0), Some(17));
        assert_eq!(value_len(b"*2\r\n$3\r\nab", 0), None);
        assert_eq!(value_len(b"%1\r\n+a\r\n+b\r\n", 0), Some(12));
    }
}
