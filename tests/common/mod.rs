// Shared by integration tests, benches, examples and the HTML oracle test: the development
// corpus and line-end variants. No inner attributes, so it can be `include!`d; users put
// `#[allow(dead_code)]` on the module.

use std::io::Read;
use std::path::PathBuf;

/// One message of the corpus.
pub struct CorpusMessage {
    /// `spam`, `ham` or `hard_ham`.
    pub label: String,
    pub name: String,
    pub raw: Vec<u8>,
}

/// Where the corpus archive lives: `$SHRIKE_CORPUS`, else `../shared/corpus/` beside the repo.
pub fn corpus_path() -> PathBuf {
    std::env::var_os("SHRIKE_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/corpus/spamassassin-dev.tar.gz")
        })
}

/// Reads every message of the development corpus straight from its .tar.gz. Panics with a clear
/// message when the archive is missing: a test that needs it must fail, not skip.
pub fn load_corpus() -> Vec<CorpusMessage> {
    let path = corpus_path();
    let file = std::fs::File::open(&path).unwrap_or_else(|e| {
        panic!(
            "corpus {} not readable ({e}); set SHRIKE_CORPUS to spamassassin-dev.tar.gz",
            path.display()
        )
    });
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut out = Vec::new();
    for entry in archive.entries().expect("corpus archive is a tar") {
        let mut entry = entry.expect("corpus entry");
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().expect("entry path").into_owned();
        let parts: Vec<String> = path
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let [_, label, name] = parts.as_slice() else {
            continue;
        };
        if !matches!(label.as_str(), "spam" | "ham" | "hard_ham") {
            continue;
        }
        let mut raw = Vec::new();
        entry.read_to_end(&mut raw).expect("corpus entry bytes");
        out.push(CorpusMessage {
            label: label.clone(),
            name: name.clone(),
            raw,
        });
    }
    out
}

/// The message with every line ending as LF.
pub fn to_lf(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    for (i, &b) in raw.iter().enumerate() {
        if !(b == b'\r' && raw.get(i + 1) == Some(&b'\n')) {
            out.push(b);
        }
    }
    out
}

/// The message with every line ending as CRLF.
pub fn to_crlf(raw: &[u8]) -> Vec<u8> {
    let lf = to_lf(raw);
    let mut out = Vec::with_capacity(lf.len() + lf.len() / 20);
    for &b in &lf {
        if b == b'\n' {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}
