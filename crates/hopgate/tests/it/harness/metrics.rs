//! Reading the Prometheus text format (`/metrics`): one value by metric
//! name and labels. Owns the parsing of a sample line; knows no metric.

/// The value of the first sample named `name` whose labels include every
/// `(label, value)` of `labels` (so `&[]` takes the first sample of that
/// name); `None` if there is none. `name` may also carry labels inline, as
/// a series copied from the exposition (`a_total{kind="x"}`). Label values
/// are compared unescaped.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let (name, inline, _) = sample(&format!("{name} 0"))?;
    let wanted = |ls: &[(String, String)]| {
        let has = |k: &str, v: &str| ls.iter().any(|(lk, lv)| lk == k && lv == v);
        labels.iter().all(|(k, v)| has(k, v)) && inline.iter().all(|(k, v)| has(k, v))
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(sample)
        .find(|(n, ls, _)| *n == name && wanted(ls))
        .map(|(_, _, v)| v)
}

type Sample = (String, Vec<(String, String)>, f64);

/// `name{k="v",...} value [timestamp]` → (name, labels, value).
fn sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_owned();
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        let mut key = String::new();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => break i,
                ',' | ' ' => {}
                '=' => {
                    // A quoted value with \\, \" and \n escapes.
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '"' => break,
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                other => value.push(other),
                            },
                            other => value.push(other),
                        }
                    }
                    labels.push((std::mem::take(&mut key), value));
                }
                other => key.push(other),
            }
        };
        rest = &body[end + 1..];
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name, labels, value))
}

#[test]
fn metric_reads_samples_by_name_and_labels() {
    let text = "# HELP a_total A.\\n# TYPE a_total counter\n\
                a_total{service=\"s\",reason=\"x,\\\"y\\\"\"} 3\n\
                a_total{service=\"s\",reason=\"drain\"} 4\n\
                b 1.5e3\n";
    assert_eq!(metric(text, "a_total", &[]), Some(3.0));
    assert_eq!(metric(text, "a_total", &[("reason", "drain")]), Some(4.0));
    assert_eq!(metric(text, "a_total", &[("reason", "x,\"y\"")]), Some(3.0));
    assert_eq!(metric(text, "b", &[]), Some(1500.0));
    assert_eq!(metric(text, "a", &[]), None);
    assert_eq!(metric(text, "a_total", &[("reason", "none")]), None);
    assert_eq!(metric(text, "a_total{reason=\"drain\"}", &[]), Some(4.0));
}
