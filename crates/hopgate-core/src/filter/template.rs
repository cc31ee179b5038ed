//! Header value templates: literal text with variables, `${name}`, parsed
//! once at load ([`Template::parse`]) and expanded per request
//! ([`Template::expand`]) without parsing. `$$` is a literal `$`; any other
//! `$` not starting `${name}` is an error, so a typo never reaches a
//! header.
//!
//! Must not touch: anything but the template's text and the request facts
//! handed in ([`Vars`]).

use std::net::IpAddr;

use http::HeaderValue;

/// A variable a header value may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Var {
    /// The client's address (as access control sees it: a trusted proxy's
    /// `X-Forwarded-For` taken into account).
    ClientIp,
    /// The request's id (`X-Request-Id`, the client's or the gateway's).
    RequestId,
    /// The route's id.
    RouteId,
    /// The host the client asked for (before any rewrite).
    Host,
    /// `http` or `https`, as the client reached the gateway.
    Scheme,
}

impl Var {
    /// Every variable, by name, in the order documentation lists them.
    pub const ALL: [(&'static str, Var); 5] = [
        ("client_ip", Var::ClientIp),
        ("request_id", Var::RequestId),
        ("route_id", Var::RouteId),
        ("host", Var::Host),
        ("scheme", Var::Scheme),
    ];

    fn named(name: &str) -> Option<Var> {
        Var::ALL.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// The variable's name, as written between `${` and `}`.
    pub fn name(self) -> &'static str {
        Var::ALL
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("?", |(n, _)| n)
    }
}

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Var(Var),
}

/// A header value: fixed (built once) or with variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Template {
    Fixed(HeaderValue),
    Parts(Vec<Part>),
}

/// What a template's variables expand to for one request.
#[derive(Clone, Copy, Debug)]
pub struct Vars<'a> {
    pub client_ip: IpAddr,
    pub request_id: &'a str,
    pub route_id: &'a str,
    pub host: &'a str,
    pub https: bool,
}

impl Template {
    /// Parses `text`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Template, String> {
        let parts = parse_parts(text)?;
        if parts.iter().all(|p| matches!(p, Part::Text(_))) {
            let mut fixed = String::new();
            for p in &parts {
                if let Part::Text(t) = p {
                    fixed.push_str(t);
                }
            }
            return HeaderValue::from_str(&fixed)
                .map(Template::Fixed)
                .map_err(|_| invalid_value(text));
        }
        // The literal parts must be valid header text on their own.
        for p in &parts {
            if let Part::Text(t) = p {
                HeaderValue::from_str(t).map_err(|_| invalid_value(text))?;
            }
        }
        Ok(Template::Parts(parts))
    }

    /// The variables the template uses.
    pub fn vars(&self) -> impl Iterator<Item = Var> + '_ {
        let parts: &[Part] = match self {
            Template::Fixed(_) => &[],
            Template::Parts(p) => p,
        };
        parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(*v),
            Part::Text(_) => None,
        })
    }

    /// The value for one request; `None` when a variable's value cannot be
    /// a header value (then the edit is skipped).
    pub fn expand(&self, vars: &Vars<'_>) -> Option<HeaderValue> {
        let parts = match self {
            Template::Fixed(v) => return Some(v.clone()),
            Template::Parts(p) => p,
        };
        let mut out = String::with_capacity(64);
        for p in parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Var(v) => push_var(&mut out, *v, vars),
            }
        }
        HeaderValue::from_str(&out).ok()
    }
}

fn push_var(out: &mut String, v: Var, vars: &Vars<'_>) {
    use std::fmt::Write as _;
    match v {
        Var::ClientIp => {
            let _ = write!(out, "{}", vars.client_ip);
        }
        Var::RequestId => out.push_str(vars.request_id),
        Var::RouteId => out.push_str(vars.route_id),
        Var::Host => out.push_str(vars.host),
        Var::Scheme => out.push_str(if vars.https { "https" } else { "http" }),
    }
}

fn invalid_value(text: &str) -> String {
    format!("invalid header value {text:?}: control characters and non-ASCII text are not allowed")
}

/// Splits `text` into literal text and variables.
fn parse_parts(text: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        lit.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(more) = after.strip_prefix('$') {
            lit.push('$');
            rest = more;
            continue;
        }
        let Some(inner) = after.strip_prefix('{') else {
            return Err(format!(
                "{text:?}: '$' starts a variable like ${{host}}; write $$ for a literal '$'"
            ));
        };
        let Some(end) = inner.find('}') else {
            return Err(format!("{text:?}: unclosed ${{ (a variable is ${{name}})"));
        };
        let name = &inner[..end];
        let Some(var) = Var::named(name) else {
            let known: Vec<&str> = Var::ALL.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "{text:?}: unknown variable ${{{name}}} (known: {})",
                known.join(", ")
            ));
        };
        if !lit.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut lit)));
        }
        parts.push(Part::Var(var));
        rest = &inner[end + 1..];
    }
    lit.push_str(rest);
    if !lit.is_empty() {
        parts.push(Part::Text(lit));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars<'static> {
        Vars {
            client_ip: "10.1.2.3".parse().unwrap(),
            request_id: "rid-1",
            route_id: "web",
            host: "example.com",
            https: true,
        }
    }

    #[test]
    fn fixed_and_variable_values_expand() {
        let cases = [
            ("plain", "plain"),
            ("a$$b", "a$b"),
            ("${client_ip}", "10.1.2.3"),
            ("id=${request_id};r=${route_id}", "id=rid-1;r=web"),
            ("${scheme}://${host}/", "https://example.com/"),
        ];
        for (text, want) in cases {
            let t = Template::parse(text).unwrap();
            assert_eq!(t.expand(&vars()).unwrap(), want, "{text}");
        }
        assert!(matches!(
            Template::parse("a$$").unwrap(),
            Template::Fixed(_)
        ));
    }

    #[test]
    fn bad_templates_say_why() {
        let cases = [
            ("${nope}", "unknown variable ${nope}"),
            ("${host", "unclosed"),
            ("$host", "write $$"),
            ("a\u{1}b", "invalid header value"),
        ];
        for (text, want) in cases {
            let e = Template::parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
