//! Byte counts and times as zpool and zfs print them: below both the table printer
//! ([`crate::format`]) and the JSON documents ([`crate::json`]), which each print them.

/// Print a byte count the way zfs does: 3 significant digits and a suffix.
pub fn human_bytes(bytes: u64) -> String {
    const SUFFIXES: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut value = bytes as f64;
    let mut index = 0;
    while value >= 1024.0 && index < SUFFIXES.len() - 1 {
        value /= 1024.0;
        index += 1;
    }
    // An exact multiple prints without decimals, as zfs_nicenum does (128K, 2G).
    let text = if bytes.is_multiple_of(1u64 << (10 * index)) {
        format!("{}", bytes >> (10 * index))
    } else if value < 10.0 {
        format!("{value:.2}")
    } else if value < 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    };
    format!("{text}{}", SUFFIXES[index])
}

/// `YYYY-MM-DD HH:MM` in UTC (days to civil date after Howard Hinnant's algorithm).
pub fn utc_time(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let minute_of_day = (seconds % 86_400) / 60;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}",
        minute_of_day / 60,
        minute_of_day % 60
    )
}
