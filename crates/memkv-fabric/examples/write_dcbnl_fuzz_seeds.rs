//! Writes the dcbnl fuzz target's seed corpus (fuzz/corpus/dcbnl): kernel replies of each
//! shape, built with `memkv_fabric::dcb::build`.
//! `cargo run -p memkv-fabric --example write_dcbnl_fuzz_seeds`.

use memkv_fabric::dcb::build;

fn main() -> std::io::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/dcbnl");
    std::fs::create_dir_all(&dir)?;
    let seeds = [
        (
            "pfc-and-dscp-apps",
            build::ieee_reply("eth0", Some(0b1000), &[(26, 3), (48, 6)]),
        ),
        ("no-pfc", build::ieee_reply("ens1f0np0", None, &[(26, 3)])),
        ("no-apps", build::ieee_reply("eth0", Some(0), &[])),
        ("eopnotsupp", build::error_reply(95)),
        ("enodev", build::error_reply(19)),
    ];
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes)?;
    }
    println!("wrote seeds to {}", dir.display());
    Ok(())
}
