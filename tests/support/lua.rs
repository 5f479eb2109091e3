//! The crate's scripts as it sends them, for tests and benches that run them directly.

/// The script `lua/<name>.lua` as the crate sends it: the shared snippets its line in
/// `src/topology/script.rs` lists (`NAME => "<name>" with "part", …`) first, in that order, then the
/// file as the function `script`, then the epilogue `lua/main.lua` that runs it.
pub fn lua(name: &str) -> String {
    let root = repository_root();
    let root = root.display();
    let read = |path: String| {
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
    };
    let list = read(format!("{root}/src/topology/script.rs"));
    let declared = format!("=> \"{name}\"");
    let line = (list.lines())
        .find(|line| !line.trim_start().starts_with("//") && line.contains(&declared))
        .unwrap_or_else(|| panic!("src/topology/script.rs declares no script {name}"));
    let parts = line.split_once(" with ").map_or("", |(_, parts)| parts);
    // The quoted names are every other piece between quotes.
    let parts = parts.split('"').skip(1).step_by(2);
    let snippets: String = parts
        .map(|file| read(format!("{root}/lua/{file}.lua")))
        .collect();
    let own = read(format!("{root}/lua/{name}.lua"));
    let main = read(format!("{root}/lua/main.lua"));
    format!("{snippets}local function script()\n{own}end\n{main}")
}

/// The repository's root, found from this file's own place: the crates that include it (the
/// library's tests, the benches, the peers benchmark) have their manifests at different
/// depths.
pub fn repository_root() -> std::path::PathBuf {
    let this = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file!());
    let this = this.canonicalize().unwrap_or(this);
    let root = this.ancestors().nth(3);
    root.expect("tests/support/lua.rs is three levels below the root")
        .to_path_buf()
}
