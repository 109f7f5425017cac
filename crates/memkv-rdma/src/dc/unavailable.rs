//! Why a device cannot run Dynamically Connected transport, as errors name it. Pure.

/// Why DC is not used on a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DcUnavailable {
    #[error("device {device} is not an mlx5 device{}", driver_suffix(driver))]
    NotMlx5 {
        device: String,
        driver: Option<String>,
    },
    /// The mlx5 provider library is missing or refused the query.
    #[error("mlx5dv_query_device failed on {device}: {} (errno {errno})", errno_text(*errno))]
    QueryFailed { device: String, errno: i32 },
    #[error("device {device} reports no DC resources (max_dc_rd_atom 0)")]
    NoDcResources { device: String },
    /// The library did not report DC resources and creating a DC initiator failed.
    #[error("creating a DC initiator on {device} failed: {} (errno {errno})", errno_text(*errno))]
    ProbeFailed { device: String, errno: i32 },
}

fn driver_suffix(driver: &Option<String>) -> String {
    driver
        .as_deref()
        .map_or_else(String::new, |d| format!(" (driver {d})"))
}

fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}
