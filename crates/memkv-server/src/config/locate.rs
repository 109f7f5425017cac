//! Finds the line of a dotted key path (`storage.drives[0].size`) in block-style YAML text.
//!
//! serde gives positions only for its own errors; semantic checks (a half-set TLS pair, a bad
//! MTU) need the line of the key they complain about. This is a line scanner, not a YAML
//! parser: it understands block mappings, block sequences (`- `), comments and block scalars
//! (`|`, `>`). Keys inside flow collections (`{a: 1}`) are not indexed; lookups then fall back
//! to the nearest indexed ancestor.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLines {
    entries: Vec<(String, usize)>,
}

struct Frame {
    indent: usize,
    path: String,
    is_item: bool,
    next_item: usize,
}

impl KeyLines {
    pub fn scan(text: &str) -> Self {
        let mut entries = Vec::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut block_scalar_indent: Option<usize> = None;
        for (index, raw) in text.lines().enumerate() {
            let content = raw.trim_start_matches(' ');
            let mut indent = raw.len() - content.len();
            if let Some(owner_indent) = block_scalar_indent {
                if content.trim().is_empty() || indent > owner_indent {
                    continue;
                }
                block_scalar_indent = None;
            }
            let mut rest = content.trim_end();
            // Tabs cannot indent YAML; the parser reports those lines itself.
            if rest.is_empty() || rest.starts_with(['#', '\t']) || rest == "---" || rest == "..." {
                continue;
            }
            while rest == "-" || rest.starts_with("- ") {
                while stack
                    .last()
                    .is_some_and(|f| f.indent > indent || (f.indent == indent && f.is_item))
                {
                    stack.pop();
                }
                let parent = stack.last_mut();
                let (parent_path, item) = match parent {
                    Some(frame) => {
                        frame.next_item += 1;
                        (frame.path.clone(), frame.next_item - 1)
                    }
                    None => (String::new(), 0),
                };
                stack.push(Frame {
                    indent,
                    path: format!("{parent_path}[{item}]"),
                    is_item: true,
                    next_item: 0,
                });
                let after_dash = rest[1..].trim_start_matches(' ');
                indent += rest.len() - after_dash.len();
                rest = after_dash;
            }
            let Some((key, value)) = split_key(rest) else {
                continue;
            };
            while stack.last().is_some_and(|f| f.indent >= indent) {
                stack.pop();
            }
            let path = match stack.last() {
                Some(parent) => format!("{}.{key}", parent.path),
                None => key.to_owned(),
            };
            entries.push((path.clone(), index + 1));
            stack.push(Frame {
                indent,
                path,
                is_item: false,
                next_item: 0,
            });
            if value.starts_with('|') || value.starts_with('>') {
                block_scalar_indent = Some(indent);
            }
        }
        Self { entries }
    }

    /// Line of `path`, or of its nearest indexed ancestor (`a.b[2].c` -> `a.b[2]` -> `a.b` ->
    /// `a`), or `None`.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut candidate = path;
        loop {
            if let Some((_, line)) = self.entries.iter().find(|(p, _)| p == candidate) {
                return Some(*line);
            }
            let cut = candidate.rfind(['.', '['])?;
            candidate = &candidate[..cut];
        }
    }

    /// Every line where exactly `path` appears (more than one for duplicate keys).
    pub fn lines_of<'a>(&'a self, path: &'a str) -> impl Iterator<Item = usize> + 'a {
        self.entries
            .iter()
            .filter(move |(p, _)| p == path)
            .map(|(_, line)| *line)
    }

    /// The last key that starts on `line`.
    pub fn key_at_line(&self, line: usize) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .find(|(_, l)| *l == line)
            .map(|(p, _)| p.as_str())
    }
}

/// `key: value` / `key:` / `"key": value` -> (key, value). `None` for anything else.
fn split_key(text: &str) -> Option<(&str, &str)> {
    if text.starts_with(['{', '[', '#', '&', '*', '!', '|', '>']) {
        return None;
    }
    let (key, value) = if let Some(quote @ ('"' | '\'')) = text.chars().next() {
        let close = text[1..].find(quote)? + 1;
        let after = text[close + 1..].strip_prefix(':')?;
        (&text[1..close], after)
    } else {
        let colon = text
            .match_indices(':')
            .map(|(i, _)| i)
            .find(|&i| text[i + 1..].is_empty() || text[i + 1..].starts_with([' ', '\t']))?;
        (text[..colon].trim_end(), &text[colon + 1..])
    };
    if !(value.is_empty() || value.starts_with([' ', '\t'])) {
        return None;
    }
    Some((key, value.trim_start()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# comment
network:
  address: 0.0.0.0:9900   # trailing comment
  tls_cert: /a.pem

storage:
  drives:
  - media: /d0
    size: 1 GiB
  -   media: /d1
  eviction: lru
  note: |
    mode: not-a-key
  block_size: 4 MiB
rdma:
  \"mtu\": 4096
lists:
  - - inner: 1
";

    #[test]
    fn finds_nested_keys_and_sequence_items() {
        let lines = KeyLines::scan(TEXT);
        assert_eq!(lines.line_of("network"), Some(2));
        assert_eq!(lines.line_of("network.address"), Some(3));
        assert_eq!(lines.line_of("network.tls_cert"), Some(4));
        assert_eq!(lines.line_of("storage.drives"), Some(7));
        assert_eq!(lines.line_of("storage.drives[0].media"), Some(8));
        assert_eq!(lines.line_of("storage.drives[0].size"), Some(9));
        assert_eq!(lines.line_of("storage.drives[1].media"), Some(10));
        assert_eq!(lines.line_of("storage.eviction"), Some(11));
        assert_eq!(lines.line_of("storage.block_size"), Some(14));
        assert_eq!(lines.line_of("rdma.mtu"), Some(16));
        assert_eq!(lines.line_of("lists[0][0].inner"), Some(18));
    }

    #[test]
    fn block_scalars_hide_their_contents() {
        let lines = KeyLines::scan(TEXT);
        assert_eq!(
            lines.line_of("storage.mode"),
            Some(6),
            "falls back to storage"
        );
        assert_eq!(lines.line_of("storage.note"), Some(12));
    }

    #[test]
    fn missing_keys_fall_back_to_ancestors() {
        let lines = KeyLines::scan(TEXT);
        assert_eq!(lines.line_of("network.tls_key"), Some(2));
        assert_eq!(lines.line_of("storage.drives[5].size"), Some(7));
        assert_eq!(lines.line_of("memory.max_size"), None);
        assert_eq!(lines.key_at_line(9), Some("storage.drives[0].size"));
        assert_eq!(lines.key_at_line(1), None);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in "[ a-z:#|>'\"\\-\n\t\u{e9}]{0,200}") {
            let lines = KeyLines::scan(&text);
            let _ = lines.line_of("a.b[0].c");
            let _ = lines.key_at_line(1);
        }
    }

    #[test]
    fn odd_text_does_not_panic() {
        for text in [
            "-",
            "- -",
            ":",
            "a:b",
            "'unterminated: x",
            "  - : x",
            "\u{e9}: 1",
        ] {
            let _ = KeyLines::scan(text);
        }
    }
}
