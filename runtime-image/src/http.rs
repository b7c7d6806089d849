//! Fetching documents over http(s) (include sources, URL artifacts): bounded in size, with a
//! clear error for non-success answers, and 404 reported apart so artifact lookup can try the
//! next source.

use std::time::Duration;

use crate::error::StepError;

/// Largest document accepted.
pub const MAX_BODY: usize = 8 * 1024 * 1024;

/// GETs `url` as text; Ok(None) on 404.
pub async fn fetch_text(url: &str) -> Result<Option<String>, StepError> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(StepError::failed(format!("{url:?} is not an http(s) URL")));
    }
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(15))
        .user_agent(concat!("pseudoflow-step/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| StepError::failed(format!("http client: {e}")))?;
    let resp = client
        .get(url)
        .send()
        .await
        .map_err(|e| StepError::failed(format!("GET {url}: {e}")))?;
    let status = resp.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(StepError::failed(format!("GET {url}: HTTP {status}")));
    }
    let mut body = Vec::new();
    let mut resp = resp;
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| StepError::failed(format!("GET {url}: {e}")))?
    {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(StepError::failed(format!(
                "GET {url}: larger than {MAX_BODY} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body)
        .map(Some)
        .map_err(|_| StepError::failed(format!("GET {url}: the document is not UTF-8 text")))
}
