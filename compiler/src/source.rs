//! Loaded files and imports.
//!
//! The source map owns the text of every file a plan reads, so that diagnostics from any
//! phase can be rendered with their snippet, and follows `import` lines (relative to the
//! importing file) with cycle detection. Files are read through [`FileLoader`], so that an
//! editor can supply unsaved buffers and tests can use in-memory files.
//!
//! Loaders hand over bytes, not text: a file that is not UTF-8 is an error in the plan
//! (P0103, at its first bad byte), decoded here for every front end alike, and not a failure
//! to read it, which is kept for files that are missing or unreadable.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use planc_lang::codes;
use planc_lang::encoding::decode;
use planc_lang::syntax::{Item, SourceFile};
use planc_lang::{parse, Diagnostic, FileId, LineIndex, Span};

pub trait FileLoader {
    /// The file's bytes, as they are; [`SourceMap`] decodes them.
    fn load(&self, path: &Path) -> std::io::Result<Vec<u8>>;
}

/// The largest file planc reads. Plans are kilobytes; the limit is there so that an
/// import of a huge file (or of `/dev/zero`) is an error and not all the machine's memory.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reads from the file system: regular files of at most [`MAX_FILE_BYTES`].
pub struct FsLoader;

impl FileLoader for FsLoader {
    fn load(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        use std::io::{Error, ErrorKind, Read};
        let file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Err(Error::new(ErrorKind::InvalidInput, "it is a directory"));
        }
        if !meta.is_file() {
            // A FIFO, a device: reading it may never end.
            return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
        }
        let too_big = || {
            Error::new(
                ErrorKind::InvalidData,
                format!("larger than the {} MiB planc reads", MAX_FILE_BYTES >> 20),
            )
        };
        if meta.len() > MAX_FILE_BYTES {
            return Err(too_big());
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        // The file may grow while it is read.
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(too_big());
        }
        Ok(bytes)
    }
}

/// Files held in memory, keyed by path (for tests and editors).
#[derive(Default)]
pub struct MemoryLoader {
    pub files: HashMap<PathBuf, Vec<u8>>,
}

impl MemoryLoader {
    /// Holds `bytes` as the file at `path`, under the spelling `load` looks up (a name
    /// such as `dir/../plan.tp`, as an editor may hand over, is found again).
    pub fn insert(&mut self, path: &Path, bytes: Vec<u8>) {
        self.files.insert(normalize(path), bytes);
    }
}

impl FileLoader for MemoryLoader {
    fn load(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        self.files
            .get(&normalize(path))
            .cloned()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"))
    }
}

/// How deep imports may chain (`a` imports `b`, which imports `c`, ...).
pub const MAX_IMPORT_DEPTH: usize = planc_lang::parser::MAX_NESTING;

pub struct SourceFileEntry {
    pub path: PathBuf,
    /// The path as shown to users (as given on the command line or in the import).
    pub display: String,
    /// The text; where the file is not UTF-8, each bad sequence is U+FFFD (and P0103 says so).
    pub text: String,
    pub lines: LineIndex,
    pub syntax: SourceFile,
    /// The files its `import` lines name (loaded, in order; a command-line setting's file
    /// names the plan it applies to). A block written again in a file that imports the
    /// file defining it, directly or not, overrides it (`resolve`).
    pub imports: Vec<FileId>,
}

#[derive(Default)]
pub struct SourceMap {
    pub files: Vec<SourceFileEntry>,
}

impl SourceMap {
    pub fn get(&self, id: FileId) -> &SourceFileEntry {
        &self.files[id.0 as usize]
    }

    /// 1-based line and column of a span's start and end.
    pub fn line_cols(&self, id: FileId, span: Span) -> ((usize, usize), (usize, usize)) {
        let f = self.get(id);
        (
            f.lines.line_col(&f.text, span.start as usize),
            f.lines.line_col(&f.text, span.end as usize),
        )
    }

    /// Whether `a` imports `b`, directly or through other imports (a file does not import
    /// itself).
    pub fn imports(&self, a: FileId, b: FileId) -> bool {
        let mut seen = vec![false; self.files.len()];
        let mut stack: Vec<FileId> = self.get(a).imports.clone();
        while let Some(f) = stack.pop() {
            if f == b {
                return true;
            }
            let i = f.0 as usize;
            if i < seen.len() && !seen[i] {
                seen[i] = true;
                stack.extend(self.get(f).imports.iter().copied());
            }
        }
        false
    }

    /// Adds a file that was not read from disk (a command-line setting), with its tree.
    pub fn add_parsed(
        &mut self,
        display: String,
        text: String,
        syntax: SourceFile,
        imports: Vec<FileId>,
    ) -> FileId {
        let id = FileId(self.files.len() as u32);
        self.files.push(SourceFileEntry {
            lines: LineIndex::new(&text),
            path: PathBuf::new(),
            display,
            text,
            syntax,
            imports,
        });
        id
    }

    fn find(&self, path: &Path) -> Option<FileId> {
        self.files
            .iter()
            .position(|f| f.path == path)
            .map(|i| FileId(i as u32))
    }

    fn add(&mut self, path: PathBuf, display: String, bytes: Vec<u8>) -> (FileId, Vec<Diagnostic>) {
        let id = FileId(self.files.len() as u32);
        let decoded = decode(bytes, id);
        let text = decoded.text;
        let parsed = parse(&text, id);
        let mut diagnostics = Vec::new();
        match decoded.error {
            Some(e) => {
                diagnostics.push(e);
                // A bad byte outside a comment is also an unexpected character; P0103 has
                // said what it is.
                diagnostics.extend(parsed.diagnostics.into_iter().filter(|d| {
                    !(d.code == codes::P0001.id
                        && d.primary
                            .as_ref()
                            .is_some_and(|l| text[l.span.range()].chars().all(|c| c == '\u{fffd}')))
                }));
            }
            None => diagnostics = parsed.diagnostics,
        }
        self.files.push(SourceFileEntry {
            lines: LineIndex::new(&text),
            path,
            display,
            text,
            syntax: parsed.file,
            imports: Vec::new(),
        });
        (id, diagnostics)
    }
}

/// Lexically cleans `a/./b/../c` to `a/c`, so that one file imported by two spellings is
/// one file.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Loads the root file and everything it imports. Returns the file ids in the order their
/// blocks should be merged (imports before the file that imports them) and the syntax and
/// import diagnostics. `Err` only when the root file itself cannot be read.
pub fn load_plan(
    root: &Path,
    loader: &dyn FileLoader,
    map: &mut SourceMap,
) -> Result<(Vec<FileId>, Vec<Diagnostic>), std::io::Error> {
    let root_path = normalize(root);
    let text = loader.load(&root_path)?;
    let (root_id, mut diagnostics) = map.add(root_path, root.display().to_string(), text);
    let mut order = Vec::new();
    let mut stack = vec![root_id];
    visit(
        root_id,
        loader,
        map,
        &mut stack,
        &mut order,
        &mut diagnostics,
    );
    Ok((order, diagnostics))
}

fn visit(
    id: FileId,
    loader: &dyn FileLoader,
    map: &mut SourceMap,
    stack: &mut Vec<FileId>,
    order: &mut Vec<FileId>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let imports: Vec<_> = map
        .get(id)
        .syntax
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Import(imp) => Some(imp.clone()),
            Item::Block(_) => None,
        })
        .collect();
    let dir = map
        .get(id)
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    for imp in imports {
        let path = normalize(&dir.join(&imp.path));
        if let Some(existing) = map.find(&path) {
            if stack.contains(&existing) {
                let chain: Vec<String> = stack
                    .iter()
                    .skip_while(|f| **f != existing)
                    .map(|f| map.get(*f).display.clone())
                    .chain(std::iter::once(map.get(existing).display.clone()))
                    .collect();
                diagnostics.push(
                    Diagnostic::new(codes::P0102, format!("import cycle: {}", chain.join(" → ")))
                        .at(id, imp.path_span, "this import closes the cycle")
                        .help("move the blocks both files need into a third file that both import"),
                );
            } else {
                map.files[id.0 as usize].imports.push(existing);
            }
            // Already loaded (a diamond import): its blocks are merged once.
            continue;
        }
        if stack.len() >= MAX_IMPORT_DEPTH {
            diagnostics.push(
                Diagnostic::new(
                    codes::P0008,
                    format!("imports nested too deeply (limit {MAX_IMPORT_DEPTH})"),
                )
                .at(id, imp.path_span, "this import is not followed")
                .help("import the shared files from the root plan instead of through a chain"),
            );
            continue;
        }
        match loader.load(&path) {
            Ok(text) => {
                // Shown as the path from where the user stands (the root's directory joined
                // with the import), so that an editor can open it from the diagnostic.
                let display = path.display().to_string();
                let (child, parse_diags) = map.add(path, display, text);
                map.files[id.0 as usize].imports.push(child);
                diagnostics.extend(parse_diags);
                stack.push(child);
                visit(child, loader, map, stack, order, diagnostics);
                stack.pop();
            }
            Err(e) => diagnostics.push(
                Diagnostic::new(
                    codes::P0101,
                    format!("cannot read imported file `{}`: {}", path.display(), e),
                )
                .at(id, imp.path_span, "imported here")
                .help("import paths are relative to the file that imports them"),
            ),
        }
    }
    order.push(id);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(files: &[(&str, &str)]) -> MemoryLoader {
        MemoryLoader {
            files: files
                .iter()
                .map(|(p, t)| (PathBuf::from(p), t.as_bytes().to_vec()))
                .collect(),
        }
    }

    #[test]
    fn a_file_that_is_not_utf8_is_a_located_error_and_the_rest_is_read() {
        let mut loader = mem(&[("a.tp", "import \"b.tp\"\nmodel m { layers = 2 }\n")]);
        loader.files.insert(
            PathBuf::from("b.tp"),
            b"train {\n  global_batch = 8 # \xe9t\xe9\n  x = \xff\n}\n".to_vec(),
        );
        let mut map = SourceMap::default();
        let (_, diags) = load_plan(Path::new("a.tp"), &loader, &mut map).unwrap();
        let codes: Vec<_> = diags.iter().map(|d| d.code).collect();
        // The bad byte in the value is not reported twice.
        assert_eq!(codes, vec!["P0103"], "{diags:#?}");
        let l = diags[0].primary.as_ref().unwrap();
        assert_eq!(map.get(l.file).display, "b.tp");
        assert_eq!(map.line_cols(l.file, l.span).0, (2, 22));
        assert_eq!(map.get(l.file).syntax.items.len(), 1);
    }

    #[test]
    fn devices_directories_and_huge_files_are_not_read() {
        let dir = std::env::temp_dir().join(format!("planc-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let huge = dir.join("huge.tp");
        let f = std::fs::File::create(&huge).unwrap();
        f.set_len(MAX_FILE_BYTES + 1).unwrap(); // sparse: no disk used
        for path in [Path::new("/dev/zero"), &dir, &huge] {
            let e = FsLoader.load(path).unwrap_err();
            assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData
                ),
                "{}: {e}",
                path.display()
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_chain_of_imports_stops_at_the_limit() {
        let n = MAX_IMPORT_DEPTH + 10;
        let files: Vec<(String, String)> = (0..n)
            .map(|i| (format!("f{i}.tp"), format!("import \"f{}.tp\"\n", i + 1)))
            .collect();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let mut map = SourceMap::default();
        let (_, diags) = load_plan(Path::new("f0.tp"), &mem(&refs), &mut map).unwrap();
        assert_eq!(diags.len(), 1, "{diags:#?}");
        assert_eq!(diags[0].code, "P0008");
        assert_eq!(map.files.len(), MAX_IMPORT_DEPTH);
    }

    #[test]
    fn imports_resolve_relative_to_the_importer() {
        let loader = mem(&[
            ("plans/a.tp", "import \"lib/b.tp\"\nmodel { layers = 1 }"),
            ("plans/lib/b.tp", "import \"../c.tp\""),
            ("plans/c.tp", "train { global_batch = 1 }"),
        ]);
        let mut map = SourceMap::default();
        let (order, diags) = load_plan(Path::new("plans/a.tp"), &loader, &mut map).unwrap();
        assert!(diags.is_empty(), "{diags:?}");
        let names: Vec<_> = order.iter().map(|f| map.get(*f).path.clone()).collect();
        assert_eq!(
            names,
            vec![
                PathBuf::from("plans/c.tp"),
                PathBuf::from("plans/lib/b.tp"),
                PathBuf::from("plans/a.tp")
            ]
        );
    }

    #[test]
    fn cycles_and_missing_files_are_reported() {
        let loader = mem(&[
            ("a.tp", "import \"b.tp\"\nimport \"missing.tp\""),
            ("b.tp", "import \"a.tp\""),
        ]);
        let mut map = SourceMap::default();
        let (_, diags) = load_plan(Path::new("a.tp"), &loader, &mut map).unwrap();
        let codes: Vec<_> = diags.iter().map(|d| d.code).collect();
        assert_eq!(codes, vec!["P0102", "P0101"]);
        assert!(
            diags[0].message.contains("a.tp → b.tp → a.tp"),
            "{}",
            diags[0].message
        );
    }
}
