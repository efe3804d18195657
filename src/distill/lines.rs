//! Reads output as lines in bounded memory: long lines are cut at [`MAX_LINE`] bytes,
//! invalid UTF-8 is replaced, ANSI escape sequences are removed, and a carriage return
//! keeps only what a terminal would finally show.

use std::io::BufRead;

use super::MAX_LINE;

pub struct Lines<R> {
    reader: R,
    raw: Vec<u8>,
    text: String,
    read: u64,
    cut: u64,
}

impl<R: BufRead> Lines<R> {
    pub fn new(reader: R) -> Self {
        Lines {
            reader,
            raw: Vec::with_capacity(1024),
            text: String::with_capacity(1024),
            read: 0,
            cut: 0,
        }
    }

    /// The next line, cleaned; `None` at the end of the input.
    pub fn next_line(&mut self) -> std::io::Result<Option<&str>> {
        self.raw.clear();
        let mut saw_any = false;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                break;
            }
            saw_any = true;
            let (chunk, consumed, done) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (&available[..i], i + 1, true),
                None => (available, available.len(), false),
            };
            let room = MAX_LINE.saturating_sub(self.raw.len());
            let keep = chunk.len().min(room);
            self.raw.extend_from_slice(&chunk[..keep]);
            self.cut += (chunk.len() - keep) as u64;
            self.read += consumed as u64;
            self.reader.consume(consumed);
            if done {
                break;
            }
        }
        if !saw_any {
            return Ok(None);
        }
        clean(&self.raw, &mut self.text);
        Ok(Some(&self.text))
    }

    pub fn bytes_read(&self) -> u64 {
        self.read
    }

    /// Bytes dropped from over-long lines.
    pub fn bytes_cut(&self) -> u64 {
        self.cut
    }
}

/// Decodes `raw` into `out`, removing ANSI escapes and resolving carriage returns.
pub fn clean(raw: &[u8], out: &mut String) {
    out.clear();
    let decoded = String::from_utf8_lossy(raw);
    let mut chars = decoded.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.peek() {
                // CSI: ESC [ parameters... final byte in @..~
                Some('[') => {
                    chars.next();
                    for n in chars.by_ref() {
                        if ('@'..='~').contains(&n) {
                            break;
                        }
                    }
                }
                // OSC: ESC ] ... BEL or ESC \
                Some(']') => {
                    chars.next();
                    while let Some(n) = chars.next() {
                        if n == '\u{7}' {
                            break;
                        }
                        if n == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                Some(_) => {
                    chars.next();
                }
                None => {}
            },
            '\r' => {
                // A terminal overwrites the line from its start; a trailing CR (CRLF
                // endings) changes nothing.
                if chars.peek().is_some() {
                    out.clear();
                }
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> Vec<String> {
        let mut lines = Lines::new(input);
        let mut out = Vec::new();
        while let Some(l) = lines.next_line().unwrap() {
            out.push(l.to_owned());
        }
        out
    }

    #[test]
    fn lines_are_cleaned() {
        assert_eq!(
            all(b"\x1b[31mred\x1b[0m text\r\nprogress 10%\rprogress 100%\nlast"),
            vec!["red text", "progress 100%", "last"]
        );
        assert_eq!(all(b""), Vec::<String>::new());
        assert_eq!(all(b"\n\n"), vec!["", ""]);
        assert_eq!(all(b"\xff\xfebad"), vec!["\u{fffd}\u{fffd}bad"]);
    }

    #[test]
    fn long_lines_are_cut_and_counted() {
        let mut input = vec![b'a'; MAX_LINE + 10];
        input.extend_from_slice(b"\nnext\n");
        let mut lines = Lines::new(&input[..]);
        assert_eq!(lines.next_line().unwrap().unwrap().len(), MAX_LINE);
        assert_eq!(lines.next_line().unwrap().unwrap(), "next");
        assert!(lines.next_line().unwrap().is_none());
        assert_eq!(lines.bytes_cut(), 10);
        assert_eq!(lines.bytes_read(), input.len() as u64);
    }
}
