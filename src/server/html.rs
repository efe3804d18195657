//! The web pages' shared frame: a rendered template as a complete response with the
//! headers every page carries (a content security policy among them), a one-message page,
//! and the HTML escaping the templates use.

use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tracing::error;

/// A page of a title and one message.
pub(super) fn message_page(status: StatusCode, title: &str, message: &str) -> Response {
    html(status, &MessagePage { title, message }, None)
}

/// A page's forms post to the address the page came from.
pub(super) const SAME_ORIGIN: &str = "'self'";

/// A complete page. Nothing here needs scripts; forms may post only to `form_target`.
pub(super) fn html(
    status: StatusCode,
    page: &impl Template,
    form_target: Option<&str>,
) -> Response {
    let page = match page.render() {
        Ok(page) => page,
        Err(e) => {
            error!(error = %e, "Could not render a page");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Could not render the page",
            )
                .into_response();
        }
    };
    let form_action = match form_target {
        None => "'none'".to_owned(),
        Some(SAME_ORIGIN) => SAME_ORIGIN.to_owned(),
        Some(url) => origin(url),
    };
    let csp = format!(
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; \
         frame-ancestors 'none'; form-action {form_action}"
    );
    let mut response = (status, page).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if let Ok(value) = HeaderValue::from_str(&csp) {
        headers.insert(header::CONTENT_SECURITY_POLICY, value);
    }
    response
}

#[derive(Template)]
#[template(path = "message.html")]
struct MessagePage<'a> {
    title: &'a str,
    message: &'a str,
}

/// How templates/*.html escape what they print (askama.toml names it): with [`escape`].
#[derive(Debug, Clone, Copy)]
pub struct Html;

impl askama::filters::Escaper for Html {
    fn write_escaped_str<W: std::fmt::Write>(&self, mut dest: W, text: &str) -> std::fmt::Result {
        dest.write_str(&escape(text))
    }
}

/// `scheme://host[:port]` of a URL, as CSP source lists take it.
fn origin(url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let host_end = url[scheme_end..]
        .find('/')
        .map_or(url.len(), |i| scheme_end + i);
    url[..host_end].to_owned()
}

/// Text made safe for HTML content and double- or single-quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped_and_origins_are_cut_at_the_host() {
        assert_eq!(
            escape("<a href='x'>\"&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&quot;&amp;&quot;&lt;/a&gt;"
        );
        assert_eq!(
            origin("https://ghe.example.com/x/y"),
            "https://ghe.example.com"
        );
        assert_eq!(origin("http://127.0.0.1:9"), "http://127.0.0.1:9");
    }
}
