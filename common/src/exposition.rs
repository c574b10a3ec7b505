//! Prometheus exposition formats: the OpenMetrics text `prometheus-client` encodes, and the
//! classic text format 0.0.4 that `curl`, `promtool check metrics` and scrapers that do not
//! ask for OpenMetrics read. Both processes' `/metrics` negotiate with [`negotiate`].
//!
//! Hand-written because the crate only encodes OpenMetrics; the difference for what we
//! expose is small and mechanical: OpenMetrics names a counter family without `_total`
//! (its samples carry it), has `# UNIT` lines, exemplars and a closing `# EOF`.

/// The OpenMetrics content type.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic text format's content type.
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a scraper's `Accept` header asks for OpenMetrics (Prometheus' does).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// The body and content type to answer a scrape with `accept`, from OpenMetrics `text`.
pub fn negotiate(accept: Option<&str>, text: String) -> (&'static str, String) {
    if wants_openmetrics(accept) {
        (OPENMETRICS, text)
    } else {
        (TEXT, to_text_format(&text))
    }
}

/// OpenMetrics text → text format 0.0.4: counter families named with `_total`, no `# UNIT`,
/// no exemplars, no `# EOF`.
pub fn to_text_format(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
            && kind.trim() == "counter"
        {
            counters.insert(name.to_string());
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = line
            .strip_prefix("# HELP ")
            .map(|r| ("# HELP ", r))
            .or_else(|| line.strip_prefix("# TYPE ").map(|r| ("# TYPE ", r)));
        if let Some((prefix, rest)) = meta {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push_str(prefix);
            out.push_str(name);
            if counters.contains(name) && !name.ends_with("_total") {
                out.push_str("_total");
            }
            if !tail.is_empty() {
                out.push(' ');
                out.push_str(tail);
            }
            out.push('\n');
            continue;
        }
        // A sample; an exemplar follows ` # ` after the value.
        let sample = match line.find(" # {") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(sample);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OM: &str = "# HELP a_reports Reports.\n# TYPE a_reports counter\na_reports_total{r=\"x\"} 3\n# HELP a_lag_seconds Lag.\n# TYPE a_lag_seconds histogram\n# UNIT a_lag_seconds seconds\na_lag_seconds_sum 1.5\na_lag_seconds_count 2\na_lag_seconds_bucket{le=\"+Inf\"} 2 # {trace=\"t\"} 1.0\n# HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n# EOF\n";

    #[test]
    fn counters_take_their_total_name_and_openmetrics_extras_go() {
        let t = to_text_format(OM);
        assert_eq!(
            t,
            "# HELP a_reports_total Reports.\n# TYPE a_reports_total counter\na_reports_total{r=\"x\"} 3\n# HELP a_lag_seconds Lag.\n# TYPE a_lag_seconds histogram\na_lag_seconds_sum 1.5\na_lag_seconds_count 2\na_lag_seconds_bucket{le=\"+Inf\"} 2\n# HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n"
        );
    }

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_text() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prom), OM.into()), (OPENMETRICS, OM.into()));
        assert_eq!(negotiate(None, OM.into()).0, TEXT);
        assert_eq!(negotiate(Some("*/*"), OM.into()).0, TEXT);
    }
}
