//! Units of the plan language and the physical dimension each one measures.
//!
//! A quantity is stored in base units (bytes, bytes per second, seconds, FLOP/s, a
//! fraction, money per GPU-hour), so that the compiler never has to remember which prefix
//! a user typed.

use std::fmt;

/// What a quantity measures. Checking a value's dimension against the one an attribute
/// expects is how `bandwidth = 80 GiB` is rejected instead of guessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dimension {
    Bytes,
    Bandwidth,
    Time,
    ComputeRate,
    Ratio,
    /// Money per GPU-hour (`cluster.price`). The currency is part of the dimension: planc
    /// has no exchange rates, so `2 USD/h + 2 EUR/h` is refused like a size plus a time.
    Price(Currency),
}

/// The currencies a price may be written in (ISO 4217 codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Currency {
    Usd,
    Eur,
    Gbp,
    Cny,
    Jpy,
}

impl Currency {
    pub const ALL: [Currency; 5] = [
        Currency::Usd,
        Currency::Eur,
        Currency::Gbp,
        Currency::Cny,
        Currency::Jpy,
    ];

    /// The ISO 4217 code, as the report writes it: `USD`.
    pub fn code(self) -> &'static str {
        match self {
            Currency::Usd => "USD",
            Currency::Eur => "EUR",
            Currency::Gbp => "GBP",
            Currency::Cny => "CNY",
            Currency::Jpy => "JPY",
        }
    }

    /// The unit a price in this currency is written with: `USD/h`.
    pub fn per_hour(self) -> &'static str {
        match self {
            Currency::Usd => "USD/h",
            Currency::Eur => "EUR/h",
            Currency::Gbp => "GBP/h",
            Currency::Cny => "CNY/h",
            Currency::Jpy => "JPY/h",
        }
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl Dimension {
    pub fn describe(self) -> &'static str {
        match self {
            Dimension::Bytes => "a size in bytes (e.g. `80 GiB`)",
            Dimension::Bandwidth => "a bandwidth (e.g. `450 GB/s` or `200 Gb/s`)",
            Dimension::Time => "a duration (e.g. `5 us`, `48 h`)",
            Dimension::ComputeRate => "a compute rate (e.g. `989 TFLOPS`)",
            Dimension::Ratio => "a percentage (e.g. `10 %`)",
            Dimension::Price(_) => "a price per GPU-hour (e.g. `2.49 USD/h`)",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dimension::Bytes => "size",
            Dimension::Bandwidth => "bandwidth",
            Dimension::Time => "time",
            Dimension::ComputeRate => "compute rate",
            Dimension::Ratio => "ratio",
            Dimension::Price(_) => "price",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A unit as written, with its dimension and its factor to base units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Unit {
    pub symbol: &'static str,
    pub dimension: Dimension,
    pub to_base: f64,
}

const K: f64 = 1e3;
const KI: f64 = 1024.0;

/// Every unit the lexer accepts. Longer symbols come first so that `GB/s` is not read as
/// `GB` followed by `/s`.
pub const UNITS: &[Unit] = &[
    // Bandwidth in bytes and bits. `GiB/s` and friends are an extension of the spec:
    // unambiguous, and what nvidia-smi and nccl-tests print.
    u("KiB/s", Dimension::Bandwidth, KI),
    u("MiB/s", Dimension::Bandwidth, KI * KI),
    u("GiB/s", Dimension::Bandwidth, KI * KI * KI),
    u("TiB/s", Dimension::Bandwidth, KI * KI * KI * KI),
    u("KB/s", Dimension::Bandwidth, K),
    u("MB/s", Dimension::Bandwidth, K * K),
    u("GB/s", Dimension::Bandwidth, K * K * K),
    u("TB/s", Dimension::Bandwidth, K * K * K * K),
    u("Kb/s", Dimension::Bandwidth, K / 8.0),
    u("Mb/s", Dimension::Bandwidth, K * K / 8.0),
    u("Gb/s", Dimension::Bandwidth, K * K * K / 8.0),
    u("Tb/s", Dimension::Bandwidth, K * K * K * K / 8.0),
    u("B/s", Dimension::Bandwidth, 1.0),
    u("Gbps", Dimension::Bandwidth, K * K * K / 8.0),
    u("TFLOP/s", Dimension::ComputeRate, 1e12),
    u("PFLOP/s", Dimension::ComputeRate, 1e15),
    u("TFLOPS", Dimension::ComputeRate, 1e12),
    u("PFLOPS", Dimension::ComputeRate, 1e15),
    u("KiB", Dimension::Bytes, KI),
    u("MiB", Dimension::Bytes, KI * KI),
    u("GiB", Dimension::Bytes, KI * KI * KI),
    u("TiB", Dimension::Bytes, KI * KI * KI * KI),
    u("KB", Dimension::Bytes, K),
    u("MB", Dimension::Bytes, K * K),
    u("GB", Dimension::Bytes, K * K * K),
    u("TB", Dimension::Bytes, K * K * K * K),
    u("B", Dimension::Bytes, 1.0),
    u("min", Dimension::Time, 60.0),
    u("ns", Dimension::Time, 1e-9),
    u("us", Dimension::Time, 1e-6),
    u("ms", Dimension::Time, 1e-3),
    u("s", Dimension::Time, 1.0),
    u("h", Dimension::Time, 3600.0),
    u("%", Dimension::Ratio, 0.01),
    // Money per GPU-hour, the way clouds and clusters bill a GPU; the base unit is the hour
    // itself (no one writes a price per second).
    u("USD/h", Dimension::Price(Currency::Usd), 1.0),
    u("EUR/h", Dimension::Price(Currency::Eur), 1.0),
    u("GBP/h", Dimension::Price(Currency::Gbp), 1.0),
    u("CNY/h", Dimension::Price(Currency::Cny), 1.0),
    u("JPY/h", Dimension::Price(Currency::Jpy), 1.0),
];

const fn u(symbol: &'static str, dimension: Dimension, to_base: f64) -> Unit {
    Unit {
        symbol,
        dimension,
        to_base,
    }
}

/// The unit with exactly this symbol.
pub fn unit(symbol: &str) -> Option<Unit> {
    UNITS.iter().copied().find(|u| u.symbol == symbol)
}

/// The unit a mistyped symbol most likely meant (`Gib` → `GiB`, `gbps` → `Gbps`).
pub fn suggest_unit(symbol: &str) -> Option<&'static str> {
    let lower = symbol.to_ascii_lowercase();
    // Spellings people write for units planc knows under a shorter symbol.
    const SPELLED: &[(&[&str], &str)] = &[
        (&["nsec", "nanosecond", "nanoseconds"], "ns"),
        (&["usec", "µs", "microsecond", "microseconds"], "us"),
        (&["msec", "millisecond", "milliseconds"], "ms"),
        (&["sec", "secs", "second", "seconds"], "s"),
        (&["mins", "minute", "minutes"], "min"),
        (&["hr", "hrs", "hour", "hours"], "h"),
        (&["tflop/s", "tflop", "tflops"], "TFLOPS"),
        (&["gbit/s", "gbits"], "Gb/s"),
        (&["byte", "bytes"], "B"),
    ];
    if let Some((_, unit)) = SPELLED
        .iter()
        .find(|(names, _)| names.contains(&lower.as_str()))
    {
        return Some(unit);
    }
    // `2.49 USD`, `2.49 usd/hr`, `2.49 USD/GPU/h`: a price is written per hour, `USD/h`.
    if let Some(c) = Currency::ALL.into_iter().find(|c| {
        lower
            .strip_prefix(&c.code().to_ascii_lowercase())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }) {
        return Some(c.per_hour());
    }
    let mut same_letters: Vec<&Unit> = UNITS
        .iter()
        .filter(|u| u.symbol.to_ascii_lowercase() == lower)
        .collect();
    // `gb/s` could be bytes or bits; say the byte one, which is what people mostly mean.
    same_letters.sort_by_key(|u| !u.symbol.contains('B'));
    same_letters.first().map(|u| u.symbol)
}

/// Formats a value in base units with a readable prefix of its dimension.
pub fn format_quantity(value: f64, dimension: Dimension) -> String {
    match dimension {
        Dimension::Bytes => format_scaled(
            value,
            &[
                (KI.powi(4), "TiB"),
                (KI.powi(3), "GiB"),
                (KI * KI, "MiB"),
                (KI, "KiB"),
            ],
            "B",
        ),
        Dimension::Bandwidth => format_scaled(
            value,
            &[(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "KB/s")],
            "B/s",
        ),
        Dimension::Time => {
            if value >= 3600.0 {
                format!("{:.2} h", value / 3600.0)
            } else if value >= 1.0 {
                format!("{:.3} s", value)
            } else if value >= 1e-3 {
                format!("{:.2} ms", value * 1e3)
            } else if value >= 1e-6 {
                format!("{:.2} us", value * 1e6)
            } else {
                format!("{:.0} ns", value * 1e9)
            }
        }
        Dimension::ComputeRate => format!("{:.1} TFLOPS", value / 1e12),
        Dimension::Ratio => format!("{:.1} %", value * 100.0),
        // As written: a price is read from the plan, not computed.
        Dimension::Price(c) => format!("{value} {}", c.per_hour()),
    }
}

/// An amount (money, GPU-hours) as people read one: three significant digits below a
/// thousand, whole units with thousands separated above (`2.49`, `0.000573`, `1,234,567`).
pub fn amount(value: f64) -> String {
    if !value.is_finite() {
        return format!("{value}");
    }
    if value.abs() < 1000.0 {
        if value == 0.0 {
            return "0".into();
        }
        let decimals = (2 - value.abs().log10().floor() as i32).clamp(0, 12) as usize;
        return format!("{value:.decimals$}");
    }
    let whole = format!("{:.0}", value.abs());
    let mut out = String::new();
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if value < 0.0 {
        out.insert(0, '-');
    }
    out
}

fn format_scaled(value: f64, scales: &[(f64, &str)], base: &str) -> String {
    for (scale, symbol) in scales {
        if value.abs() >= *scale {
            return format!("{:.2} {}", value / scale, symbol);
        }
    }
    format!("{value:.0} {base}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_and_bytes_differ_by_eight() {
        let gbit = unit("Gb/s").unwrap();
        let gbyte = unit("GB/s").unwrap();
        assert_eq!(gbyte.to_base / gbit.to_base, 8.0);
        assert_eq!(unit("Gbps").unwrap().to_base, gbit.to_base);
        assert_eq!(200.0 * gbit.to_base, 25e9);
    }

    #[test]
    fn binary_and_decimal_prefixes() {
        assert_eq!(unit("GiB").unwrap().to_base, 1073741824.0);
        assert_eq!(unit("GB").unwrap().to_base, 1e9);
        assert_eq!(unit("GiB").unwrap().dimension, Dimension::Bytes);
        assert_eq!(unit("GB/s").unwrap().dimension, Dimension::Bandwidth);
    }

    #[test]
    fn suggestions_fix_case() {
        assert_eq!(suggest_unit("Gib"), Some("GiB"));
        assert_eq!(suggest_unit("gbps"), Some("Gbps"));
        assert_eq!(suggest_unit("tflops"), Some("TFLOPS"));
        assert_eq!(suggest_unit("parsecs"), None);
    }

    #[test]
    fn prices_are_per_hour_and_keep_their_currency() {
        let usd = unit("USD/h").unwrap();
        assert_eq!(usd.dimension, Dimension::Price(Currency::Usd));
        assert_ne!(usd.dimension, unit("EUR/h").unwrap().dimension);
        assert_eq!(usd.to_base, 1.0);
        assert_eq!(suggest_unit("USD"), Some("USD/h"));
        assert_eq!(suggest_unit("eur/hr"), Some("EUR/h"));
        assert_eq!(suggest_unit("usd/gpu/h"), Some("USD/h"));
        assert_eq!(suggest_unit("usdollars"), None);
        assert_eq!(
            format_quantity(2.49, Dimension::Price(Currency::Usd)),
            "2.49 USD/h"
        );
    }

    #[test]
    fn amounts_read_as_three_digits_then_separated_thousands() {
        assert_eq!(amount(2.494), "2.49");
        assert_eq!(amount(0.000573), "0.000573");
        assert_eq!(amount(159.36), "159");
        assert_eq!(amount(999.4), "999");
        assert_eq!(amount(0.0), "0");
        assert_eq!(amount(1234.4), "1,234");
        assert_eq!(amount(1234567.0), "1,234,567");
        assert_eq!(amount(-12345.0), "-12,345");
    }

    #[test]
    fn formats_with_prefix() {
        assert_eq!(
            format_quantity(80.0 * 1073741824.0, Dimension::Bytes),
            "80.00 GiB"
        );
        assert_eq!(format_quantity(0.0125, Dimension::Time), "12.50 ms");
    }
}
