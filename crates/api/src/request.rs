//! Reading a request the same way whether it came from API Gateway (payload v2, maybe with a
//! stage in the path) or from a plain `http::Request` of the local server (no request
//! context, no path parameters): route from the raw path, parameters from the URI.

use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};

use crate::error::ApiError;

/// The request path as segments, stage prefix removed, each segment percent-decoded.
pub fn path_segments(req: &Request) -> Result<Vec<String>, ApiError> {
    let mut path = req.uri().path();
    if let Some(RequestContext::ApiGatewayV2(ctx)) = req.request_context_ref()
        && let Some(stage) = ctx.stage.as_deref().filter(|s| *s != "$default")
        && let Some(rest) = path.strip_prefix('/').and_then(|p| p.strip_prefix(stage))
        && (rest.is_empty() || rest.starts_with('/'))
    {
        path = rest;
    }
    let path = path.strip_prefix('/').unwrap_or(path);
    let path = path.strip_suffix('/').unwrap_or(path);
    if path.is_empty() {
        return Ok(Vec::new());
    }
    path.split('/')
        .map(|seg| {
            percent_decode(seg, false)
                .ok_or_else(|| ApiError::bad("path", "malformed percent-encoding or not UTF-8"))
        })
        .collect()
}

/// Query parameters, decoded (`+` is a space), in order of appearance.
pub fn query_pairs(req: &Request) -> Result<Vec<(String, String)>, ApiError> {
    match req.uri().query() {
        Some(q) if !q.is_empty() => q
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                let bad =
                    || ApiError::bad("query string", "malformed percent-encoding or not UTF-8");
                Ok((
                    percent_decode(k, true).ok_or_else(bad)?,
                    percent_decode(v, true).ok_or_else(bad)?,
                ))
            })
            .collect(),
        // A request built without a query in its URI may still carry lambda_http's map.
        _ => Ok(req
            .query_string_parameters_ref()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect()
            })
            .unwrap_or_default()),
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

pub fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let h = hex(*b.get(i + 1)?)?;
                let l = hex(*b.get(i + 2)?)?;
                out.push(h << 4 | l);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Parameters a request may give more than once (`?tag=site:A&tag=line:3`); each route says
/// how many it takes.
pub const REPEATABLE: &[&str] = &["tag"];

/// The query parameters of one route: each at most once (but [`REPEATABLE`] ones), none the
/// route does not know.
#[derive(Debug)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    pub fn new(pairs: Vec<(String, String)>, allowed: &[&str]) -> Result<Self, ApiError> {
        for (i, (k, _)) in pairs.iter().enumerate() {
            if !allowed.contains(&k.as_str()) {
                let allowed = if allowed.is_empty() {
                    "none".to_owned()
                } else {
                    allowed.join(", ")
                };
                return Err(ApiError::bad(
                    k.clone(),
                    format!("unknown query parameter; this route takes: {allowed}"),
                ));
            }
            if !REPEATABLE.contains(&k.as_str()) && pairs[..i].iter().any(|(p, _)| p == k) {
                return Err(ApiError::bad(k.clone(), "given more than once"));
            }
        }
        Ok(Params { pairs })
    }

    /// Every value of a [`REPEATABLE`] parameter, in order of appearance.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The value of a parameter given once (the first of a [`REPEATABLE`] one).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_handles_reserved_and_malformed_input() {
        assert_eq!(percent_decode("a%23b", false).as_deref(), Some("a#b"));
        assert_eq!(percent_decode("a+b", true).as_deref(), Some("a b"));
        assert_eq!(percent_decode("a+b", false).as_deref(), Some("a+b"));
        assert_eq!(percent_decode("%zz", false), None);
        assert_eq!(percent_decode("%2", false), None);
        assert_eq!(percent_decode("%ff", false), None);
    }

    #[test]
    fn parameters_are_known_and_unique() {
        let p = |v: &[(&str, &str)]| {
            Params::new(
                v.iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
                &["from", "to"],
            )
        };
        assert_eq!(p(&[("from", "1")]).unwrap().get("from"), Some("1"));
        assert!(
            matches!(p(&[("form", "1")]), Err(ApiError::BadRequest { param, .. }) if param == "form")
        );
        assert!(p(&[("from", "1"), ("from", "2")]).is_err());
        let tags = Params::new(
            vec![
                ("tag".into(), "site:A".into()),
                ("tag".into(), "line:3".into()),
            ],
            &["tag"],
        )
        .unwrap();
        assert_eq!(tags.all("tag"), ["site:A", "line:3"]);
    }
}
