//! The bench's units: block-size sweeps ("4K,1M,16M"), durations ("10s") and their display.

use std::time::Duration;

/// Largest block a sweep may name: the protocol's default value limit.
pub const MAX_BLOCK: u64 = 64 << 20;

/// Parses one size: bytes, or a number with K, M or G (powers of 1024; `KiB`, `KB` and `k`
/// mean the same, as in fio and redis-benchmark). 1 byte ..= 64 MiB.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => 0,
    };
    let size = digits
        .parse::<u64>()
        .ok()
        .filter(|_| scale > 0)
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{t:?} is not a size such as 4096, 4K, 1M or 16M"))?;
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

/// Parses "500ms", "10s", "2m", or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let millis: u64 = match unit.trim() {
        "ms" => 1,
        "" | "s" => 1000,
        "m" | "min" => 60_000,
        _ => 0,
    };
    let duration = digits
        .parse::<u64>()
        .ok()
        .filter(|_| millis > 0)
        .and_then(|n| n.checked_mul(millis))
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{t:?} is not a duration such as 500ms, 10s or 2m"))?;
    if duration.is_zero() || duration > MAX_DURATION {
        return Err(format!("{t:?} is out of range: 1ms ..= 24h"));
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
        assert_eq!(parse_size("16KB"), Ok(16 << 10));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size(" 16M "), Ok(16 << 20));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1b"), Ok(1));
    }

    #[test]
    fn bad_sizes_name_the_entry_and_the_limit() {
        for bad in [
            "",
            "K",
            "4X",
            "1.5M",
            "-4K",
            "4 K B",
            "99999999999999999999G",
        ] {
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
        for bad in ["", "0", "0s", "1h", "1.5s", "25m0", "2000m"] {
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
