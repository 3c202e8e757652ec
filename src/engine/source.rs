//! Where a rule set comes from: a directory on disk (`--rules DIR`) or the default set compiled
//! into the binary. Reading happens here, once per generation; scans never touch the filesystem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use include_dir::{include_dir, Dir};

use super::lists::{List, ListKind, Lists};
use super::LoadError;

static EMBEDDED_RULES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/rules");
static EMBEDDED_LIB: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/lua");

/// Most rule files, library modules and list files a set may have.
pub const MAX_FILES: usize = 10_000;
/// Largest rule or module file read.
pub const MAX_SOURCE_BYTES: u64 = 4 * 1024 * 1024;
/// Largest list file read.
pub const MAX_LIST_BYTES: u64 = 256 * 1024 * 1024;

/// Where rules are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleLocation {
    /// The default set compiled into the binary.
    Embedded,
    /// A rule directory alone: `DIR/*.lua`, `DIR/lua/`, `DIR/lists/`.
    Dir(PathBuf),
    /// Rule directories laid over each other in order, over the shipped set when `shipped`:
    /// a file of a later layer replaces the file of the same name of an earlier one (the
    /// shipped set is the first layer), any other file adds to the set (rspamd's `local.d`).
    Layers { shipped: bool, dirs: Vec<PathBuf> },
}

impl RuleLocation {
    /// The location of `dirs` laid over the shipped set (`shipped`) or over nothing, in its
    /// simplest form: the shipped set alone is `Embedded`, one directory alone is `Dir`.
    /// `None` when there is nothing to read (no shipped set and no directory).
    pub fn layered(shipped: bool, dirs: Vec<PathBuf>) -> Option<RuleLocation> {
        match (shipped, dirs.len()) {
            (true, 0) => Some(RuleLocation::Embedded),
            (false, 0) => None,
            (false, 1) => dirs.into_iter().next().map(RuleLocation::Dir),
            _ => Some(RuleLocation::Layers { shipped, dirs }),
        }
    }

    /// Whether the shipped set is the first layer, and the directories over it.
    pub fn layers(&self) -> (bool, &[PathBuf]) {
        match self {
            RuleLocation::Embedded => (true, &[]),
            RuleLocation::Dir(d) => (false, std::slice::from_ref(d)),
            RuleLocation::Layers { shipped, dirs } => (*shipped, dirs),
        }
    }

    /// Directories a watcher should follow.
    pub fn watch_paths(&self) -> Vec<PathBuf> {
        self.layers().1.to_vec()
    }

    /// Display name.
    pub fn describe(&self) -> String {
        match self {
            RuleLocation::Embedded => "embedded default rules".into(),
            RuleLocation::Dir(d) => d.display().to_string(),
            RuleLocation::Layers { shipped, dirs } => {
                let mut parts: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
                if *shipped {
                    parts.insert(0, "embedded default rules".into());
                }
                parts.join(" + ")
            }
        }
    }
}

/// One Lua file.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// Name in messages and chunk names: `rules/10_headers.lua`, `lua/shrike/util.lua`.
    pub name: String,
    pub text: Arc<str>,
    /// Compiled into the binary (the shipped set), not read from a directory.
    pub shipped: bool,
    /// The file of an earlier layer this one replaced (same file name).
    pub replaces: Option<String>,
}

impl SourceFile {
    fn new(name: String, text: Arc<str>, shipped: bool) -> SourceFile {
        SourceFile {
            name,
            text,
            shipped,
            replaces: None,
        }
    }
}

/// Everything a generation is built from.
#[derive(Debug, Default)]
pub struct Sources {
    /// Library modules by module name (`shrike.util`), the set's own over the built-in ones.
    pub modules: BTreeMap<String, SourceFile>,
    /// Rule files in load order.
    pub rules: Vec<SourceFile>,
    pub lists: Lists,
    /// XXH3-128 of every file's name and bytes, in load order: equal fingerprints, same set.
    pub fingerprint: u128,
}

/// The library directory of a rule directory: `DIR/lua`. Its modules overlay the built-in
/// library (compiled in from the repository's `lua/`). Nothing is looked up outside DIR.
fn library_dir(dir: &Path) -> Option<PathBuf> {
    let own = dir.join("lua");
    own.is_dir().then_some(own)
}

/// Reads a rule set.
pub fn read(location: &RuleLocation) -> Result<Sources, LoadError> {
    let mut list_hashes = Vec::new();
    let mut sources = read_files(location, &mut list_hashes)?;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let files = sources.modules.values().chain(&sources.rules);
    for f in files {
        for part in [f.name.as_bytes(), f.text.as_bytes()] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part);
        }
    }
    for (name, hash) in &list_hashes {
        h.update(&(name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(&hash.to_le_bytes());
    }
    sources.fingerprint = h.digest128();
    Ok(sources)
}

/// Reads every file; `list_hashes` gets each list file's name and XXH3-128 (lists are kept
/// parsed, not as text). Layers are read in order; within the set, rule files load in the
/// order of their file names, whichever layer they come from.
fn read_files(
    location: &RuleLocation,
    list_hashes: &mut Vec<(String, u128)>,
) -> Result<Sources, LoadError> {
    let mut sources = Sources::default();
    embedded_modules(&EMBEDDED_LIB, &mut sources.modules);
    let (shipped, dirs) = location.layers();
    // file name → the file; a later layer's file replaces an earlier one's
    let mut rules: BTreeMap<String, SourceFile> = BTreeMap::new();
    // list file name → (its path for the kind and stem, display name, text)
    let mut lists: BTreeMap<String, (PathBuf, String, Arc<str>)> = BTreeMap::new();
    fn put_rule(rules: &mut BTreeMap<String, SourceFile>, key: String, mut file: SourceFile) {
        if let Some(old) = rules.remove(&key) {
            file.replaces = Some(old.name);
        }
        rules.insert(key, file);
    }
    if shipped {
        for f in EMBEDDED_RULES.files() {
            if f.path().extension().is_none_or(|e| e != "lua") {
                continue;
            }
            let text = f.contents_utf8().ok_or_else(|| LoadError::Read {
                file: f.path().display().to_string(),
                message: "not UTF-8".into(),
            })?;
            let key = f.path().display().to_string();
            let name = format!("rules/{key}");
            put_rule(&mut rules, key, SourceFile::new(name, text.into(), true));
        }
        if let Some(dir) = EMBEDDED_RULES.get_dir("lists") {
            for f in dir.files() {
                let name = f.path().display().to_string();
                let text = f.contents_utf8().ok_or_else(|| LoadError::Read {
                    file: name.clone(),
                    message: "not UTF-8".into(),
                })?;
                let key = file_name(f.path());
                lists.insert(key, (f.path().to_path_buf(), name, text.into()));
            }
        }
    }
    for dir in dirs {
        if !dir.is_dir() {
            return Err(LoadError::Read {
                file: dir.display().to_string(),
                message: "not a directory".into(),
            });
        }
        if let Some(lib) = library_dir(dir) {
            dir_modules(&lib, &lib, &mut sources.modules, 0)?;
        }
        for path in sorted_files(dir)? {
            if path.extension().is_some_and(|e| e == "lua") {
                let text = read_text(&path, MAX_SOURCE_BYTES)?;
                let name = path.display().to_string();
                put_rule(
                    &mut rules,
                    file_name(&path),
                    SourceFile::new(name, text.into(), false),
                );
            }
        }
        let list_dir = dir.join("lists");
        if list_dir.is_dir() {
            for path in sorted_files(&list_dir)? {
                let text = read_text(&path, MAX_LIST_BYTES)?;
                let name = path.display().to_string();
                lists.insert(file_name(&path), (path, name, text.into()));
            }
        }
        if rules.len() + sources.modules.len() + lists.len() > MAX_FILES {
            break;
        }
    }
    sources.rules = rules.into_values().collect();
    if sources.rules.len() + sources.modules.len() + lists.len() > MAX_FILES {
        return Err(LoadError::Read {
            file: location.describe(),
            message: format!("more than {MAX_FILES} files"),
        });
    }
    for (path, name, text) in lists.values() {
        add_list(&mut sources.lists, path, name, text, list_hashes)?;
    }
    Ok(sources)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn add_list(
    lists: &mut Lists,
    path: &Path,
    name: &str,
    text: &str,
    hashes: &mut Vec<(String, u128)>,
) -> Result<(), LoadError> {
    hashes.push((
        name.to_string(),
        xxhash_rust::xxh3::xxh3_128(text.as_bytes()),
    ));
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let Some(kind) = ListKind::from_extension(ext) else {
        // README files and the like.
        return Ok(());
    };
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let list = List::parse(kind, name, text).map_err(|e| LoadError::List(e.to_string()))?;
    if lists.by_name.insert(stem.clone(), Arc::new(list)).is_some() {
        return Err(LoadError::List(format!(
            "{name}: a list named {stem:?} is defined twice"
        )));
    }
    Ok(())
}

fn embedded_modules(dir: &Dir<'_>, out: &mut BTreeMap<String, SourceFile>) {
    for f in dir.files() {
        let path = f.path();
        if path.extension().is_some_and(|e| e == "lua") {
            if let (Some(name), Some(text)) = (module_name(path), f.contents_utf8()) {
                out.insert(
                    name,
                    SourceFile::new(format!("lua/{}", path.display()), text.into(), true),
                );
            }
        }
    }
    for d in dir.dirs() {
        embedded_modules(d, out);
    }
}

fn dir_modules(
    root: &Path,
    dir: &Path,
    out: &mut BTreeMap<String, SourceFile>,
    depth: usize,
) -> Result<(), LoadError> {
    if depth > 8 {
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| io_error(dir, e))?.path();
        if path.is_dir() {
            dir_modules(root, &path, out, depth + 1)?;
        } else if path.extension().is_some_and(|e| e == "lua") {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            if let Some(name) = module_name(rel) {
                let text = read_text(&path, MAX_SOURCE_BYTES)?;
                let mut file = SourceFile::new(path.display().to_string(), text.into(), false);
                file.replaces = out.get(&name).map(|old| old.name.clone());
                out.insert(name, file);
            }
        }
    }
    Ok(())
}

/// `shrike/util.lua` → `shrike.util`; None for an editor's annotation file (`*.d.lua`, such as
/// `lua/shrike.d.lua`), which describes the API and is never loaded.
fn module_name(rel: &Path) -> Option<String> {
    if rel
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".d.lua"))
    {
        return None;
    }
    let s = rel.with_extension("");
    let parts: Vec<&str> = s.iter().filter_map(|c| c.to_str()).collect();
    (!parts.is_empty()).then(|| parts.join("."))
}

fn sorted_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io_error(dir, e))? {
        let path = entry.map_err(|e| io_error(dir, e))?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if path.is_file() && !hidden {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn read_text(path: &Path, max: u64) -> Result<String, LoadError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, e))?;
    if meta.len() > max {
        return Err(LoadError::Read {
            file: path.display().to_string(),
            message: format!("larger than {max} bytes"),
        });
    }
    let bytes = std::fs::read(path).map_err(|e| io_error(path, e))?;
    String::from_utf8(bytes).map_err(|_| LoadError::Read {
        file: path.display().to_string(),
        message: "not UTF-8".into(),
    })
}

fn io_error(path: &Path, e: std::io::Error) -> LoadError {
    LoadError::Read {
        file: path.display().to_string(),
        message: e.to_string(),
    }
}
