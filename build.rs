//! Records the commit tether is built from, for `tether version` and `--version`: `git
//! rev-parse` where the source is a git checkout, else `$TETHER_COMMIT` (an image build passes
//! it), else `unknown`.

use std::process::Command;

fn main() {
    let from_git = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|commit| !commit.is_empty());
    let commit = from_git
        .or_else(|| std::env::var("TETHER_COMMIT").ok())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=TETHER_COMMIT={commit}");
    println!("cargo:rerun-if-env-changed=TETHER_COMMIT");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
}
