//! Aligned text tables, as `kubectl get` prints them: two spaces between columns, headers
//! in capitals, optional ANSI colour that never shifts the alignment.
use std::fmt::Write as _;

/// A cell's colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Green.
    Good,
    /// Yellow.
    Warn,
    /// Red.
    Bad,
}

impl Tone {
    fn code(self) -> &'static str {
        match self {
            Tone::Good => "32",
            Tone::Warn => "33",
            Tone::Bad => "31",
        }
    }

    /// `text` in this colour.
    pub fn paint(self, text: &str) -> String {
        format!("\u{1b}[{}m{text}\u{1b}[0m", self.code())
    }
}

/// One cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    text: String,
    tone: Option<Tone>,
}

impl Cell {
    /// Uncoloured.
    pub fn plain(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            tone: None,
        }
    }

    /// Coloured when the table is rendered with colour.
    pub fn toned(text: impl Into<String>, tone: Tone) -> Cell {
        Cell {
            text: text.into(),
            tone: Some(tone),
        }
    }
}

/// A table.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| (*h).to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells print empty, extra cells are dropped).
    pub fn push(&mut self, row: Vec<Cell>) {
        self.rows.push(row);
    }

    /// The text, one line per row, columns padded to their widest cell (in characters).
    pub fn render(&self, colour: bool) -> String {
        let width = |s: &str| s.chars().count();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(width(&c.text));
            }
        }
        let mut out = String::new();
        let last = widths.len().saturating_sub(1);
        let line = |out: &mut String, cells: Vec<(&str, Option<Tone>)>| {
            let mut l = String::new();
            for (i, w) in widths.iter().enumerate() {
                let (text, tone) = cells.get(i).copied().unwrap_or(("", None));
                let pad = if i == last { 0 } else { w - width(text) + 2 };
                match tone {
                    Some(t) if colour => l.push_str(&t.paint(text)),
                    _ => l.push_str(text),
                }
                l.push_str(&" ".repeat(pad));
            }
            let _ = writeln!(out, "{}", l.trim_end());
        };
        line(
            &mut out,
            self.headers.iter().map(|h| (h.as_str(), None)).collect(),
        );
        for r in &self.rows {
            line(
                &mut out,
                r.iter().map(|c| (c.text.as_str(), c.tone)).collect(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_with_and_without_colour() {
        let mut t = Table::new(&["NAME", "CPU"]);
        t.push(vec![
            Cell::plain("node-long-name"),
            Cell::toned("90%", Tone::Bad),
        ]);
        t.push(vec![Cell::plain("n"), Cell::toned("5%", Tone::Good)]);
        let plain = t.render(false);
        assert_eq!(
            plain,
            "NAME            CPU\nnode-long-name  90%\nn               5%\n"
        );
        let coloured = t.render(true);
        assert_eq!(
            coloured.lines().nth(1),
            Some("node-long-name  \u{1b}[31m90%\u{1b}[0m")
        );
    }
}
