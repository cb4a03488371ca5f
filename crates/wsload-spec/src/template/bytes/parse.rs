//! The parser of bytes templates and of a match's bytes: hex runs, quoted text with its
//! placeholders, binary placeholders, groups; each error says what to write instead.

use super::super::{Part, TemplateError, placeholder, push_literal};
use super::{BytesError, LengthKind, MAX_DEPTH, MAX_LENGTHS, Num, Width};

/// Parses a bytes template: its literal bytes, and its parts (literals as ranges of them).
pub(in crate::template) fn parse(
    source: &str,
    vars: &[&str],
) -> Result<(Vec<u8>, Vec<Part>), TemplateError> {
    let mut p = Parser {
        src: source.as_bytes(),
        source,
        vars,
        at: 0,
        literals: Vec::new(),
        parts: Vec::new(),
        depth: 0,
        opened: [0; MAX_DEPTH],
        lengths: 0,
        pads: 0,
    };
    p.run()?;
    Ok((p.literals, p.parts))
}

/// A match's bytes (`match.bytes`): hex and quoted text, nothing that changes.
pub fn fixed(source: &str) -> Result<Vec<u8>, BytesError> {
    let (literals, parts) = parse(source, &[]).map_err(|e| match e {
        TemplateError::Bytes(b) => b,
        _ => BytesError::NotFixed,
    })?;
    if parts.iter().any(|p| !matches!(p, Part::Literal(_))) {
        return Err(BytesError::NotFixed);
    }
    if literals.is_empty() {
        return Err(BytesError::Empty);
    }
    Ok(literals)
}

struct Parser<'a> {
    src: &'a [u8],
    source: &'a str,
    vars: &'a [&'a str],
    at: usize,
    literals: Vec<u8>,
    parts: Vec<Part>,
    depth: usize,
    /// Where each open group began, for the error if it is not closed.
    opened: [usize; MAX_DEPTH],
    lengths: usize,
    pads: usize,
}

impl<'a> Parser<'a> {
    fn run(&mut self) -> Result<(), TemplateError> {
        while let Some(&b) = self.src.get(self.at) {
            match b {
                b' ' | b'\t' | b'\n' | b'\r' => self.at += 1,
                b'"' => self.quoted()?,
                b'(' => {
                    if self.depth == MAX_DEPTH {
                        return Err(BytesError::TooDeep.into());
                    }
                    self.opened[self.depth] = self.at;
                    self.depth += 1;
                    self.parts.push(Part::Open);
                    self.at += 1;
                }
                b')' => {
                    if self.depth == 0 {
                        return Err(BytesError::UnopenedGroup { at: self.at }.into());
                    }
                    self.depth -= 1;
                    self.parts.push(Part::Close);
                    self.at += 1;
                }
                b'$' if self.src[self.at..].starts_with(b"${") => {
                    let (name, end) = self.placeholder_name()?;
                    let part = self.binary_placeholder(name)?;
                    self.push(part)?;
                    self.at = end;
                }
                b if b.is_ascii_hexdigit() => self.hex()?,
                _ => {
                    let found = self.source[self.at..].chars().next().unwrap_or('?');
                    return Err(BytesError::NotHex { at: self.at, found }.into());
                }
            }
        }
        if self.depth > 0 {
            let at = self.opened[self.depth - 1];
            return Err(BytesError::UnclosedGroup { at }.into());
        }
        Ok(())
    }

    /// A run of hex digits, two a byte.
    fn hex(&mut self) -> Result<(), TemplateError> {
        let start = self.at;
        let run = self.src[start..]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        if run % 2 == 1 {
            return Err(BytesError::OddHex {
                at: start + run - 1,
            }
            .into());
        }
        let from = self.literals.len();
        for pair in self.src[start..start + run].chunks(2) {
            self.literals.push((nibble(pair[0]) << 4) | nibble(pair[1]));
        }
        push_literal(&mut self.parts, from..self.literals.len());
        self.at += run;
        Ok(())
    }

    /// Text in double quotes: its UTF-8 bytes, `\"` and `\\` unescaped, placeholders as in a
    /// text template (`$${` a literal `${`).
    fn quoted(&mut self) -> Result<(), TemplateError> {
        let open = self.at;
        self.at += 1;
        let mut from = self.literals.len();
        loop {
            let Some(&b) = self.src.get(self.at) else {
                return Err(BytesError::UnclosedQuote { at: open }.into());
            };
            match b {
                b'"' => {
                    self.at += 1;
                    push_literal(&mut self.parts, from..self.literals.len());
                    return Ok(());
                }
                b'\\' => {
                    let found = self.source[self.at + 1..].chars().next().unwrap_or(' ');
                    if found != '"' && found != '\\' {
                        return Err(BytesError::BadEscape { at: self.at, found }.into());
                    }
                    self.literals.push(found as u8);
                    self.at += 2;
                }
                b'$' if self.src[self.at..].starts_with(b"$${") => {
                    self.literals.extend_from_slice(b"${");
                    self.at += 3;
                }
                b'$' if self.src[self.at..].starts_with(b"${") => {
                    push_literal(&mut self.parts, from..self.literals.len());
                    let (name, end) = self.placeholder_name()?;
                    if self.binary_placeholder(name).is_ok_and(|p| !is_text(&p)) {
                        return Err(BytesError::BinaryInText { text: name.into() }.into());
                    }
                    let part = placeholder(name, self.vars)?;
                    if part == Part::Random {
                        return Err(BytesError::RandomText.into());
                    }
                    self.push(part)?;
                    self.at = end;
                    from = self.literals.len();
                }
                _ => {
                    self.literals.push(b);
                    self.at += 1;
                }
            }
        }
    }

    /// The name of the placeholder at `self.at` (between `${` and `}`) and where it ends.
    fn placeholder_name(&self) -> Result<(&'a str, usize), TemplateError> {
        let source = self.source;
        let close = source[self.at..]
            .find('}')
            .ok_or(TemplateError::Unclosed { at: self.at })?;
        Ok((&source[self.at + 2..self.at + close], self.at + close + 1))
    }

    /// A placeholder outside quotes: a binary number, a length, or what text templates have
    /// but a number's digits.
    fn binary_placeholder(&self, name: &str) -> Result<Part, TemplateError> {
        let num = |n: &str| match n {
            "conn" => Some(Num::Conn),
            "seq" => Some(Num::Seq),
            "sendTime" => Some(Num::SendTime),
            "random" => Some(Num::Random),
            _ => None,
        };
        if let Some(kind) = name.strip_prefix("len:") {
            return LengthKind::parse(kind)
                .map(Part::Length)
                .ok_or_else(|| BytesError::BadLength { text: name.into() }.into());
        }
        if let Some((n, w)) = name.split_once(':')
            && let Some(n) = num(n)
        {
            return Width::parse(w)
                .map(|w| Part::Binary(n, w))
                .ok_or_else(|| BytesError::BadWidth { text: name.into() }.into());
        }
        if num(name).is_some() {
            return Err(BytesError::NeedsWidth { name: name.into() }.into());
        }
        placeholder(name, self.vars)
    }

    fn push(&mut self, part: Part) -> Result<(), TemplateError> {
        match part {
            Part::Pad => {
                self.pads += 1;
                if self.pads > 1 {
                    return Err(TemplateError::TwoPads);
                }
            }
            Part::Length(_) => {
                self.lengths += 1;
                if self.lengths > MAX_LENGTHS {
                    return Err(BytesError::TooManyLengths.into());
                }
            }
            _ => {}
        }
        self.parts.push(part);
        Ok(())
    }
}

/// Whether a placeholder outside quotes writes text (hex digits, a UUID, the pad, a
/// variable's bytes), which may also go inside them.
fn is_text(p: &Part) -> bool {
    !matches!(p, Part::Binary(..) | Part::Length(_))
}

fn nibble(h: u8) -> u8 {
    match h {
        b'0'..=b'9' => h - b'0',
        b'a'..=b'f' => h - b'a' + 10,
        _ => h - b'A' + 10,
    }
}
