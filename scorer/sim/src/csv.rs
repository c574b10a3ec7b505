//! A small CSV reader for the simulator's node, trace and usage tables: a header row names
//! the columns (any order; unknown columns are rejected so typos do not pass silently),
//! fields are comma-separated and trimmed, and blank lines and lines starting with `#` are
//! skipped. Quoting is not supported: no field of these tables needs a comma.
use std::collections::HashMap;
use std::str::FromStr;

use thiserror::Error;

/// Errors reading a CSV table.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CsvError {
    /// The table has no header row.
    #[error("{table}: no header row")]
    NoHeader {
        /// Which table (file name or kind).
        table: String,
    },
    /// A header names a column the table does not know, or names one twice.
    #[error("{table}: header: {message}")]
    Header {
        /// Which table.
        table: String,
        /// What is wrong.
        message: String,
    },
    /// A required column is missing from the header.
    #[error("{table}: missing required column {column:?}")]
    MissingColumn {
        /// Which table.
        table: String,
        /// The column.
        column: String,
    },
    /// A row has a different number of fields than the header.
    #[error("{table}:{line}: {got} fields, header has {want}")]
    FieldCount {
        /// Which table.
        table: String,
        /// 1-based line number.
        line: usize,
        /// Fields in the row.
        got: usize,
        /// Fields in the header.
        want: usize,
    },
    /// A field does not parse or is out of range.
    #[error("{table}:{line}: column {column:?}: {message}")]
    Field {
        /// Which table.
        table: String,
        /// 1-based line number.
        line: usize,
        /// The column.
        column: String,
        /// What is wrong.
        message: String,
    },
}

/// A parsed table: the header's column positions and the data rows with line numbers.
#[derive(Debug)]
pub struct Table<'a> {
    table: String,
    columns: HashMap<&'a str, usize>,
    rows: Vec<(usize, Vec<&'a str>)>,
}

/// One data row, for typed field access.
#[derive(Debug, Clone, Copy)]
pub struct Row<'t, 'a> {
    table: &'t Table<'a>,
    line: usize,
    fields: &'t [&'a str],
}

impl<'a> Table<'a> {
    /// Parses `text`; `known` lists every allowed column, `required` those that must appear.
    pub fn parse(
        table: &str,
        text: &'a str,
        known: &[&str],
        required: &[&str],
    ) -> Result<Table<'a>, CsvError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let (_, header) = lines.next().ok_or_else(|| CsvError::NoHeader {
            table: table.to_string(),
        })?;
        let mut columns = HashMap::new();
        for (i, name) in header.split(',').map(str::trim).enumerate() {
            if !known.contains(&name) {
                return Err(CsvError::Header {
                    table: table.to_string(),
                    message: format!("unknown column {name:?} (known: {})", known.join(", ")),
                });
            }
            if columns.insert(name, i).is_some() {
                return Err(CsvError::Header {
                    table: table.to_string(),
                    message: format!("column {name:?} appears twice"),
                });
            }
        }
        if let Some(missing) = required.iter().find(|c| !columns.contains_key(*c)) {
            return Err(CsvError::MissingColumn {
                table: table.to_string(),
                column: missing.to_string(),
            });
        }
        let want = columns.len();
        let mut rows = Vec::new();
        for (line, l) in lines {
            let fields: Vec<&str> = l.split(',').map(str::trim).collect();
            if fields.len() != want {
                return Err(CsvError::FieldCount {
                    table: table.to_string(),
                    line,
                    got: fields.len(),
                    want,
                });
            }
            rows.push((line, fields));
        }
        Ok(Table {
            table: table.to_string(),
            columns,
            rows,
        })
    }

    /// The data rows, in file order.
    pub fn rows(&self) -> impl Iterator<Item = Row<'_, 'a>> {
        self.rows.iter().map(move |(line, fields)| Row {
            table: self,
            line: *line,
            fields,
        })
    }

    /// Number of data rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when there are no data rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl<'a> Row<'_, 'a> {
    /// 1-based line number of the row.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The raw field of `column`; `None` when the column is absent or the field empty.
    pub fn raw(&self, column: &str) -> Option<&'a str> {
        let i = *self.table.columns.get(column)?;
        let v = self.fields[i];
        (!v.is_empty()).then_some(v)
    }

    /// An error about `column` in this row.
    pub fn error(&self, column: &str, message: impl Into<String>) -> CsvError {
        CsvError::Field {
            table: self.table.table.clone(),
            line: self.line,
            column: column.to_string(),
            message: message.into(),
        }
    }

    /// The parsed field of `column`, or `default` when absent or empty.
    pub fn get_or<T: FromStr>(&self, column: &str, default: T) -> Result<T, CsvError>
    where
        T::Err: std::fmt::Display,
    {
        match self.raw(column) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|e| self.error(column, format!("{v:?}: {e}"))),
        }
    }

    /// The parsed field of a required `column`.
    pub fn get<T: FromStr>(&self, column: &str) -> Result<T, CsvError>
    where
        T::Err: std::fmt::Display,
    {
        let v = self
            .raw(column)
            .ok_or_else(|| self.error(column, "value required"))?;
        v.parse()
            .map_err(|e| self.error(column, format!("{v:?}: {e}")))
    }

    /// A finite, non-negative number from `column` (or `default`).
    pub fn nonneg_or(&self, column: &str, default: f64) -> Result<f64, CsvError> {
        let v: f64 = self.get_or(column, default)?;
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(self.error(column, format!("{v} must be a finite number ≥ 0")))
        }
    }

    /// A required finite, non-negative number from `column`.
    pub fn nonneg(&self, column: &str) -> Result<f64, CsvError> {
        let v: f64 = self.get(column)?;
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(self.error(column, format!("{v} must be a finite number ≥ 0")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_typed_fields_and_reports_line_and_column() {
        let text = "# comment\nname, cpus ,ghz\n\na,4,2.5\nb,8,\n";
        let t = Table::parse(
            "nodes.csv",
            text,
            &["name", "cpus", "ghz"],
            &["name", "cpus"],
        )
        .expect("valid");
        let rows: Vec<_> = t.rows().collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].get::<u32>("cpus"), Ok(4));
        assert_eq!(rows[1].nonneg_or("ghz", 3.0), Ok(3.0));
        assert_eq!(rows[1].line(), 5);
        let bad = Table::parse("n", "name,cpus\na,x\n", &["name", "cpus"], &[]).expect("ok");
        let err = bad
            .rows()
            .next()
            .expect("row")
            .get::<u32>("cpus")
            .expect_err("bad");
        assert_eq!(
            err.to_string(),
            "n:2: column \"cpus\": \"x\": invalid digit found in string"
        );
    }

    #[test]
    fn rejects_bad_headers_and_rows() {
        assert!(matches!(
            Table::parse("t", "", &["a"], &[]),
            Err(CsvError::NoHeader { .. })
        ));
        assert!(matches!(
            Table::parse("t", "a,zz\n", &["a"], &[]),
            Err(CsvError::Header { .. })
        ));
        assert!(matches!(
            Table::parse("t", "a\n1\n", &["a", "b"], &["b"]),
            Err(CsvError::MissingColumn { .. })
        ));
        assert_eq!(
            Table::parse("t", "a,b\n1\n", &["a", "b"], &[]).expect_err("count"),
            CsvError::FieldCount {
                table: "t".into(),
                line: 2,
                got: 1,
                want: 2
            }
        );
    }
}
