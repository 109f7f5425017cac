//! The bench's units: block-size sweeps ("4K,1M,16M"), durations ("10s") and their display.

use std::time::Duration;

/// Largest block a sweep may name: the protocol's default value limit.
pub const MAX_BLOCK: u64 = 64 << 20;

/// Parses one block size (`memkv_config::parse_size`'s forms: "4K", "1M", "16 MiB", "4096"):
/// 1 byte ..= 64 MiB.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let size = memkv_config::parse_size(t)
        .map_err(|e| format!("{t:?} is not a size such as 4096, 4K, 1M or 16M ({e})"))?
        .bytes();
    if size == 0 || size > MAX_BLOCK {
        return Err(format!(
            "{t:?} is out of range: block sizes are 1 byte ..= 64M (the value limit)"
        ));
    }
    Ok(size)
}

/// Parses a comma-separated sweep, keeping the order given; duplicates are refused.
pub fn parse_sweep(text: &str) -> Result<Vec<u64>, String> {
    let mut sizes = Vec::new();
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("{text:?}: empty entry in the size list"));
        }
        let size = parse_size(part)?;
        if sizes.contains(&size) {
            return Err(format!("{text:?}: {part} is listed twice"));
        }
        sizes.push(size);
    }
    Ok(sizes)
}

/// Longest run accepted per block size.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// Parses "500ms", "10s", "2m", or a bare number of seconds: 1 ms ..= 24 h.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = memkv_config::parse_duration(text, memkv_config::BareNumber::Seconds)
        .map_err(|e| e.to_string())?;
    if duration < Duration::from_millis(1) || duration > MAX_DURATION {
        return Err(format!("{:?} is out of range: 1ms ..= 24h", text.trim()));
    }
    Ok(duration)
}

/// "4K", "1M", "1536K", "100": the shortest exact form, as the sweep is written.
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Nanoseconds as a short latency: "850ns", "12.3us", "4.56ms", "1.20s".
pub fn format_latency(nanos: Option<u64>) -> String {
    let Some(n) = nanos else {
        return "-".into();
    };
    let n = n as f64;
    if n < 1e3 {
        format!("{n:.0}ns")
    } else if n < 1e6 {
        format!("{:.1}us", n / 1e3)
    } else if n < 1e9 {
        format!("{:.2}ms", n / 1e6)
    } else {
        format!("{:.2}s", n / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_the_usual_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("16KB"), Ok(16_000));
        assert_eq!(parse_size("1 MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size(" 16M "), Ok(16 << 20));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1b"), Ok(1));
    }

    #[test]
    fn bad_sizes_name_the_entry_and_the_limit() {
        for bad in ["", "K", "4X", "-4K", "4 K B", "99999999999999999999G"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("is not a size"), "{bad:?}: {e}");
        }
        for bad in ["0", "0K", "65M", "1G"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("64M"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_sweep_keeps_its_order() {
        assert_eq!(
            parse_sweep("4K,16K,64K,256K,1M,4M,16M"),
            Ok(vec![
                4 << 10,
                16 << 10,
                64 << 10,
                256 << 10,
                1 << 20,
                4 << 20,
                16 << 20
            ])
        );
        assert_eq!(parse_sweep("1M, 4K"), Ok(vec![1 << 20, 4 << 10]));
        assert!(parse_sweep("4K,,1M").unwrap_err().contains("empty entry"));
        assert!(parse_sweep("4K,4096").unwrap_err().contains("twice"));
        assert!(parse_sweep("4K,2Q").unwrap_err().contains("\"2Q\""));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "0", "0s", "25h", "1.5.1s", "25m0", "2000m"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_print_as_written() {
        assert_eq!(format_size(4096), "4K");
        assert_eq!(format_size(1 << 20), "1M");
        assert_eq!(format_size(1536 << 10), "1536K");
        assert_eq!(format_size(100), "100");
        assert_eq!(format_size(1 << 30), "1G");
    }

    #[test]
    fn latencies_print_in_a_fitting_unit() {
        assert_eq!(format_latency(None), "-");
        assert_eq!(format_latency(Some(850)), "850ns");
        assert_eq!(format_latency(Some(12_345)), "12.3us");
        assert_eq!(format_latency(Some(4_560_000)), "4.56ms");
        assert_eq!(format_latency(Some(1_200_000_000)), "1.20s");
    }
}
