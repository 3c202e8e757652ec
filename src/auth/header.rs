//! The `Authentication-Results` header (RFC 8601) of a message's results, and the check that
//! an incoming one claims our authserv-id (such a header is a forgery unless we wrote it: the
//! milter removes it, RFC 8601 5).

use super::{AuthResults, MethodResult, Status};

/// The header's value (without the name), folded one method a line.
pub fn authentication_results(
    authserv_id: &str,
    results: &AuthResults,
    mail_from: &str,
    helo: &str,
) -> String {
    let mut parts: Vec<String> = Vec::new();
    for d in &results.dkim {
        let mut p = method("dkim", d);
        if let Some(domain) = &d.domain {
            p.push_str(&format!(" header.d={}", value(domain)));
        }
        if let Some(s) = &d.selector {
            p.push_str(&format!(" header.s={}", value(s)));
        }
        parts.push(p);
    }
    if let Some(s) = &results.spf {
        let mut p = method("spf", s);
        let sender = if mail_from.contains('@') {
            mail_from.to_string()
        } else {
            format!("postmaster@{helo}")
        };
        p.push_str(&format!(" smtp.mailfrom={}", value(&sender)));
        parts.push(p);
    }
    if let Some(h) = results.helo.as_ref().filter(|h| h.result != Status::None) {
        let mut p = method("spf", h);
        p.push_str(&format!(" smtp.helo={}", value(helo)));
        parts.push(p);
    }
    if let Some(d) = &results.dmarc {
        let mut p = method("dmarc", d);
        if let Some(policy) = &d.policy {
            p.push_str(&format!(" policy.dmarc={policy}"));
        }
        if let Some(domain) = &d.domain {
            p.push_str(&format!(" header.from={}", value(domain)));
        }
        parts.push(p);
    }
    if let Some(a) = results.arc.as_ref().filter(|a| a.result != Status::None) {
        parts.push(method("arc", a));
    }
    if parts.is_empty() {
        return format!("{authserv_id}; none");
    }
    format!("{authserv_id};\r\n\t{}", parts.join(";\r\n\t"))
}

fn method(name: &str, r: &MethodResult) -> String {
    let mut s = format!("{name}={}", r.result.as_str());
    if let Some(reason) = r.reason.as_ref().filter(|_| r.result != Status::Pass) {
        // A comment; parentheses and backslashes in it are escaped (RFC 5322 ccontent).
        let clean: String = reason
            .chars()
            .filter(|c| !c.is_control())
            .take(120)
            .flat_map(|c| match c {
                '(' | ')' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        s.push_str(&format!(" ({clean})"));
    }
    s
}

/// A property value: a token as it is, anything else quoted.
fn value(v: &str) -> String {
    let token = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_graphic() && !b"()<>,;:\\\"[]?=".contains(&b));
    if token {
        v.to_string()
    } else {
        let escaped: String = v
            .chars()
            .filter(|c| !c.is_control())
            .flat_map(|c| match c {
                '"' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        format!("\"{escaped}\"")
    }
}

/// Whether an `Authentication-Results` value names `authserv_id` (the first token before `;`,
/// an optional version after it, comments skipped), compared without case.
pub fn claims_authserv_id(header_value: &str, authserv_id: &str) -> bool {
    let mut v = header_value.trim_start();
    // leading comments: "(comment) id; ..."
    while let Some(rest) = v.strip_prefix('(') {
        match rest.find(')') {
            Some(end) => v = rest[end + 1..].trim_start(),
            None => return false,
        }
    }
    let id_end = v
        .find(|c: char| c == ';' || c.is_whitespace() || c == '(')
        .unwrap_or(v.len());
    v[..id_end]
        .trim_matches('"')
        .eq_ignore_ascii_case(authserv_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lists_each_method_with_its_properties() {
        let r = AuthResults {
            spf: Some(MethodResult {
                result: Status::Fail,
                domain: Some("example.com".into()),
                reason: Some("not (allowed)".into()),
                ..Default::default()
            }),
            helo: Some(MethodResult::of(Status::None)),
            dkim: vec![MethodResult {
                result: Status::Pass,
                domain: Some("example.com".into()),
                selector: Some("s1".into()),
                aligned: true,
                ..Default::default()
            }],
            dmarc: Some(MethodResult {
                result: Status::Pass,
                domain: Some("example.com".into()),
                policy: Some("reject".into()),
                ..Default::default()
            }),
            arc: Some(MethodResult::of(Status::None)),
            from_domain: Some("example.com".into()),
        };
        let h = authentication_results("mx.test", &r, "a@example.com", "mail.example.com");
        assert_eq!(
            h,
            "mx.test;\r\n\tdkim=pass header.d=example.com header.s=s1;\r\n\t\
             spf=fail (not \\(allowed\\)) smtp.mailfrom=a@example.com;\r\n\t\
             dmarc=pass policy.dmarc=reject header.from=example.com"
        );
        assert_eq!(
            authentication_results("mx.test", &AuthResults::default(), "", ""),
            "mx.test; none"
        );
    }

    #[test]
    fn authserv_id_claims() {
        assert!(claims_authserv_id("mx.test; spf=pass", "MX.test"));
        assert!(claims_authserv_id(" (x) mx.test 1; none", "mx.test"));
        assert!(claims_authserv_id("mx.test;dkim=pass", "mx.test"));
        assert!(!claims_authserv_id("mx.test.evil; none", "mx.test"));
        assert!(!claims_authserv_id("other; none", "mx.test"));
        assert!(!claims_authserv_id(
            "(unterminated mx.test; none",
            "mx.test"
        ));
    }
}
