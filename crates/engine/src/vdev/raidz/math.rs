//! RAID-Z parity generation and reconstruction over GF(2^8).
//!
//! # What this computes
//!
//! The field is GF(2^8) with the polynomial `x^8 + x^4 + x^3 + x^2 + 1`
//! (0x11d) and generator 2, as in OpenZFS `vdev_raidz.c` /
//! `vdev_raidz_math_impl.h`. For `n` data columns `D_0 .. D_{n-1}`:
//!
//! ```text
//!   P = D_0 + D_1 + ... + D_{n-1}                      (XOR)
//!   Q = 2^(n-1) D_0 + 2^(n-2) D_1 + ... + D_{n-1}       (Horner: Q = 2Q + D_i)
//!   R = 4^(n-1) D_0 + 4^(n-2) D_1 + ... + D_{n-1}       (Horner: R = 4R + D_i)
//! ```
//!
//! Columns have unequal lengths: in a RAID-Z map the first columns are one
//! sector longer than the rest. A shorter column counts as zero past its end,
//! and every parity column is as long as the longest data column. The
//! syndromes are byte-for-byte those of OpenZFS.
//!
//! # Reconstruction
//!
//! Parity row `r` (0 = P, 1 = Q, 2 = R) weights data column `j` by
//! `2^(r * (n-1-j))`. With `k` data columns missing, pick the first `k`
//! parity rows still present; each gives a syndrome `S_t = parity_t + (the
//! row evaluated over the present data)`, which equals the row evaluated over
//! the missing columns alone. That is a `k x k` linear system whose matrix is
//! invertible for every choice of rows and columns when `n <= 255` (1x1: a
//! power of 2; 2x2: `a != b` with `a, b` distinct powers of 2, also after
//! squaring; 3x3: a Vandermonde matrix), so it is inverted over GF(2^8) and
//! applied byte-wise (the general method of OpenZFS
//! `vdev_raidz_reconstruct_general`). Missing parity columns are then
//! regenerated from the completed data.
//!
//! The work is done in place: syndrome `t` is written into the buffer of the
//! `t`-th longest missing data column, and the solve runs in chunks through a
//! small stack buffer. Past the end of a shorter missing column the system
//! shrinks to the longer missing columns, whose syndromes are exactly the
//! ones kept in the longer buffers, so no byte is lost.
//!
//! # Speed
//!
//! Generation and syndromes use 64-bit SWAR words: multiplying 8 bytes by 2
//! at once is `((x & 0x7f..) << 1) ^ (0x1d & mask of bytes whose top bit was
//! set)`. Multiplication by an arbitrary constant `c` (the solve step) splits
//! each byte into nibbles and looks both up in 16-entry tables
//! `c * lo` and `c * (hi << 4)`; on x86_64 with AVX2 (detected at run time)
//! `vpshufb` does 32 of those lookups per instruction, otherwise a portable
//! scalar loop is used. Work is done in chunks that stay in L1 cache.
//! `generate` and `verify_parity` never allocate on the heap (apart from the
//! result vector of `verify_parity`); `reconstruct` uses only fixed-size
//! stack buffers.

use std::fmt;

/// Field polynomial of GF(2^8) used by RAID-Z, `x^8 + x^4 + x^3 + x^2 + 1`.
pub const POLYNOMIAL: u16 = 0x11d;

/// Maximum parity level supported (RAID-Z3).
pub const MAX_PARITY: usize = 3;

/// Maximum number of data columns: beyond 255 two data columns would share
/// a Q coefficient and reconstruction would be ambiguous.
pub const MAX_DATA_COLUMNS: usize = 255;

/// Bytes processed per pass; small enough that the accumulators and one data
/// column chunk stay in L1.
const CHUNK: usize = 4096;

const fn build_exp() -> [u8; 512] {
    let mut t = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 512 {
        t[i] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLYNOMIAL;
        }
        i += 1;
    }
    t
}

const fn build_log(exp: &[u8; 512]) -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

/// `EXP[i] = 2^i` for `i < 512` (the table is doubled to skip a modulo).
static EXP: [u8; 512] = build_exp();
/// `LOG[x] = log2(x)` for `x != 0`; `LOG[0]` is unused.
static LOG: [u8; 256] = build_log(&EXP);

/// Product of two field elements.
pub fn gf_mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// Multiplicative inverse of a non-zero field element.
///
/// # Panics
/// Panics if `a == 0`.
pub fn gf_inv(a: u8) -> u8 {
    assert!(a != 0, "zero has no inverse in GF(2^8)");
    EXP[255 - LOG[a as usize] as usize]
}

/// `2^e` in the field.
pub fn gf_pow2(e: usize) -> u8 {
    EXP[e % 255]
}

/// Coefficient of data column `j` (of `n`) in parity row `row`.
fn coefficient(row: usize, n: usize, j: usize) -> u8 {
    gf_pow2(row * (n - 1 - j))
}

// ---------------------------------------------------------------------------
// SWAR kernels: 8 bytes per u64 word.

const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const HIGH: u64 = 0x8080_8080_8080_8080;
const REDUCE: u64 = 0x1d1d_1d1d_1d1d_1d1d;

/// Multiplies each of the 8 bytes of `x` by 2.
#[inline(always)]
fn mul2_word(x: u64) -> u64 {
    let hi = x & HIGH;
    // (hi << 1) - (hi >> 7) turns every 0x80 byte into 0xff without carries
    // between bytes (the top byte wraps correctly).
    let mask = (hi << 1).wrapping_sub(hi >> 7);
    ((x & LOW7) << 1) ^ (mask & REDUCE)
}

/// Multiplies each of the 8 bytes of `x` by 2^LOG (LOG in 0..=2).
#[inline(always)]
fn mulpow_word<const LOG: u32>(x: u64) -> u64 {
    match LOG {
        0 => x,
        1 => mul2_word(x),
        _ => mul2_word(mul2_word(x)),
    }
}

#[inline(always)]
fn load(b: &[u8]) -> u64 {
    u64::from_ne_bytes(b.try_into().expect("8-byte chunk"))
}

/// `acc = 2^LOG * acc + d` over `acc.len() == d.len()` bytes.
#[inline(always)]
fn step1<const LOG: u32>(acc: &mut [u8], d: &[u8]) {
    debug_assert_eq!(acc.len(), d.len());
    let mut a8 = acc.chunks_exact_mut(8);
    let mut d8 = d.chunks_exact(8);
    for (a, d) in (&mut a8).zip(&mut d8) {
        a.copy_from_slice(&(mulpow_word::<LOG>(load(a)) ^ load(d)).to_ne_bytes());
    }
    for (a, d) in a8.into_remainder().iter_mut().zip(d8.remainder()) {
        *a = mulpow_word::<LOG>(u64::from(*a)) as u8 ^ *d;
    }
}

/// `acc = 2^LOG * acc` (a data column that ended before this range).
#[inline(always)]
fn tail1<const LOG: u32>(acc: &mut [u8]) {
    if LOG == 0 {
        return;
    }
    let mut a8 = acc.chunks_exact_mut(8);
    for a in &mut a8 {
        a.copy_from_slice(&mulpow_word::<LOG>(load(a)).to_ne_bytes());
    }
    for a in a8.into_remainder() {
        *a = mulpow_word::<LOG>(u64::from(*a)) as u8;
    }
}

/// Fused P and Q step: `p += d; q = 2q + d`.
#[inline(always)]
fn step_pq(p: &mut [u8], q: &mut [u8], d: &[u8]) {
    let n = d.len() & !7;
    for ((p, q), d) in p[..n]
        .chunks_exact_mut(8)
        .zip(q[..n].chunks_exact_mut(8))
        .zip(d[..n].chunks_exact(8))
    {
        let d = load(d);
        p.copy_from_slice(&(load(p) ^ d).to_ne_bytes());
        q.copy_from_slice(&(mul2_word(load(q)) ^ d).to_ne_bytes());
    }
    step1::<0>(&mut p[n..d.len()], &d[n..]);
    step1::<1>(&mut q[n..d.len()], &d[n..]);
}

/// Fused P, Q and R step: `p += d; q = 2q + d; r = 4r + d`.
#[inline(always)]
fn step_pqr(p: &mut [u8], q: &mut [u8], r: &mut [u8], d: &[u8]) {
    let n = d.len() & !7;
    for (((p, q), r), d) in p[..n]
        .chunks_exact_mut(8)
        .zip(q[..n].chunks_exact_mut(8))
        .zip(r[..n].chunks_exact_mut(8))
        .zip(d[..n].chunks_exact(8))
    {
        let d = load(d);
        p.copy_from_slice(&(load(p) ^ d).to_ne_bytes());
        q.copy_from_slice(&(mul2_word(load(q)) ^ d).to_ne_bytes());
        r.copy_from_slice(&(mulpow_word::<2>(load(r)) ^ d).to_ne_bytes());
    }
    step1::<0>(&mut p[n..d.len()], &d[n..]);
    step1::<1>(&mut q[n..d.len()], &d[n..]);
    step1::<2>(&mut r[n..d.len()], &d[n..]);
}

/// The part of column `d` inside `[start, start + len)`, possibly shorter
/// (or empty) when the column ends earlier.
#[inline(always)]
fn window(d: &[u8], start: usize, len: usize) -> &[u8] {
    let s = start.min(d.len());
    &d[s..(start + len).min(d.len())]
}

/// Evaluates parity rows `0..outs.len()` (P, PQ or PQR) over the data
/// columns at bytes `[start, start + outs[0].len())`, writing into `outs`.
fn gen_rows_chunk<D: AsRef<[u8]>>(data: &[D], start: usize, outs: &mut [&mut [u8]]) {
    let len = outs[0].len();
    let d0 = window(data[0].as_ref(), start, len);
    for o in outs.iter_mut() {
        o[..d0.len()].copy_from_slice(d0);
        o[d0.len()..].fill(0);
    }
    for d in &data[1..] {
        let d = window(d.as_ref(), start, len);
        let k = d.len();
        match outs {
            [p] => step1::<0>(&mut p[..k], d),
            [p, q] => {
                step_pq(p, q, d);
                tail1::<1>(&mut q[k..]);
            }
            [p, q, r] => {
                step_pqr(p, q, r, d);
                tail1::<1>(&mut q[k..]);
                tail1::<2>(&mut r[k..]);
            }
            _ => unreachable!("1..=3 parity rows"),
        }
    }
}

/// Evaluates the single parity row `row` over the data columns at bytes
/// `[start, start + out.len())`, writing into `out`. Empty data columns
/// count as zero, which is how missing columns are left out.
fn gen_row_chunk<D: AsRef<[u8]>>(row: usize, data: &[D], start: usize, out: &mut [u8]) {
    let len = out.len();
    let d0 = window(data[0].as_ref(), start, len);
    out[..d0.len()].copy_from_slice(d0);
    out[d0.len()..].fill(0);
    for d in &data[1..] {
        let d = window(d.as_ref(), start, len);
        let k = d.len();
        let (head, tail) = out.split_at_mut(k);
        match row {
            0 => step1::<0>(head, d),
            1 => {
                step1::<1>(head, d);
                tail1::<1>(tail);
            }
            _ => {
                step1::<2>(head, d);
                tail1::<2>(tail);
            }
        }
    }
}

/// Evaluates parity row `row` over `data` into the whole of `out`.
fn gen_row<D: AsRef<[u8]>>(row: usize, data: &[D], out: &mut [u8]) {
    for (i, chunk) in out.chunks_mut(CHUNK).enumerate() {
        gen_row_chunk(row, data, i * CHUNK, chunk);
    }
}

// ---------------------------------------------------------------------------
// Multiplication by a constant: nibble tables, AVX2 vpshufb or scalar.

/// `(c * x, c * (x << 4))` for `x` in 0..16.
fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    let mut lo = [0u8; 16];
    let mut hi = [0u8; 16];
    for x in 0..16u8 {
        lo[x as usize] = gf_mul(c, x);
        hi[x as usize] = gf_mul(c, x << 4);
    }
    (lo, hi)
}

/// Portable kernel: `dst = c * src` (or `dst += c * src` when `XOR`).
fn mul_scalar<const XOR: bool>(dst: &mut [u8], src: &[u8], lo: &[u8; 16], hi: &[u8; 16]) {
    assert_eq!(dst.len(), src.len());
    for (d, &s) in dst.iter_mut().zip(src) {
        let v = lo[(s & 15) as usize] ^ hi[(s >> 4) as usize];
        *d = if XOR { *d ^ v } else { v };
    }
}

/// AVX2 kernel: `dst = c * src` (or `dst += c * src` when `XOR`), 32 bytes
/// per `vpshufb` pair.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn mul_avx2<const XOR: bool>(dst: &mut [u8], src: &[u8], lo: &[u8; 16], hi: &[u8; 16]) {
    use std::arch::x86_64::*;
    assert_eq!(dst.len(), src.len());
    // SAFETY: `lo` and `hi` are 16 readable bytes; unaligned loads are used.
    let (tlo, thi) = unsafe {
        (
            _mm256_broadcastsi128_si256(_mm_loadu_si128(lo.as_ptr().cast())),
            _mm256_broadcastsi128_si256(_mm_loadu_si128(hi.as_ptr().cast())),
        )
    };
    let mask = _mm256_set1_epi8(0x0f);
    let n = dst.len() & !31;
    let mut i = 0;
    while i < n {
        // SAFETY: i + 32 <= n <= len of both slices, so the 32-byte unaligned
        // load from `src` and load/store on `dst` stay in bounds; `dst` and
        // `src` cannot overlap (one is borrowed mutably).
        unsafe {
            let v = _mm256_loadu_si256(src.as_ptr().add(i).cast());
            let l = _mm256_and_si256(v, mask);
            let h = _mm256_and_si256(_mm256_srli_epi64(v, 4), mask);
            let mut r = _mm256_xor_si256(_mm256_shuffle_epi8(tlo, l), _mm256_shuffle_epi8(thi, h));
            let out = dst.as_mut_ptr().add(i).cast::<__m256i>();
            if XOR {
                r = _mm256_xor_si256(r, _mm256_loadu_si256(out));
            }
            _mm256_storeu_si256(out, r);
        }
        i += 32;
    }
    mul_scalar::<XOR>(&mut dst[n..], &src[n..], lo, hi);
}

#[cfg(target_arch = "x86_64")]
fn have_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// `dst = c * src` (or `dst += c * src` when `XOR`), fastest kernel available.
fn mul_const<const XOR: bool>(dst: &mut [u8], src: &[u8], c: u8) {
    if !XOR && c == 1 {
        dst.copy_from_slice(src);
        return;
    }
    let (lo, hi) = nibble_tables(c);
    #[cfg(target_arch = "x86_64")]
    if have_avx2() {
        // SAFETY: AVX2 support was detected at run time just above.
        unsafe { mul_avx2::<XOR>(dst, src, &lo, &hi) };
        return;
    }
    mul_scalar::<XOR>(dst, src, &lo, &hi);
}

// ---------------------------------------------------------------------------
// Small matrices over GF(2^8).

type Matrix = [[u8; MAX_PARITY]; MAX_PARITY];

/// Inverts the leading `k x k` block of `m` by Gauss-Jordan elimination.
/// Returns `None` if it is singular (never the case for RAID-Z rows).
fn invert(m: &Matrix, k: usize) -> Option<Matrix> {
    let mut a = *m;
    let mut inv = [[0u8; MAX_PARITY]; MAX_PARITY];
    for (i, row) in inv.iter_mut().enumerate().take(k) {
        row[i] = 1;
    }
    for col in 0..k {
        let pivot = (col..k).find(|&r| a[r][col] != 0)?;
        a.swap(col, pivot);
        inv.swap(col, pivot);
        let f = gf_inv(a[col][col]);
        for x in 0..k {
            a[col][x] = gf_mul(a[col][x], f);
            inv[col][x] = gf_mul(inv[col][x], f);
        }
        for r in 0..k {
            if r != col && a[r][col] != 0 {
                let g = a[r][col];
                for x in 0..k {
                    a[r][x] ^= gf_mul(g, a[col][x]);
                    inv[r][x] ^= gf_mul(g, inv[col][x]);
                }
            }
        }
    }
    Some(inv)
}

// ---------------------------------------------------------------------------
// Public API.

/// Why [`reconstruct`] refused to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconstructError {
    /// The parity level is not 1..=3.
    InvalidParity(usize),
    /// More columns are missing than there are parity columns.
    TooManyMissing {
        /// Number of distinct missing columns requested.
        missing: usize,
        /// Parity level of the map.
        parity: usize,
    },
    /// A missing index is out of range or listed twice.
    BadIndex(usize),
    /// Column lengths are inconsistent: no data column, more than
    /// [`MAX_DATA_COLUMNS`] data columns, a parity column whose length differs
    /// from the longest data column, or a data column longer than the parity.
    BadLengths,
}

impl fmt::Display for ReconstructError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReconstructError::InvalidParity(p) => write!(f, "invalid RAID-Z parity level {p}"),
            ReconstructError::TooManyMissing { missing, parity } => write!(
                f,
                "{missing} columns missing but only {parity} parity columns"
            ),
            ReconstructError::BadIndex(i) => write!(f, "bad or duplicate missing column index {i}"),
            ReconstructError::BadLengths => write!(f, "inconsistent RAID-Z column lengths"),
        }
    }
}

impl std::error::Error for ReconstructError {}

/// Checks the column shape: returns the parity column length (longest data
/// column).
fn check_shape<D: AsRef<[u8]>>(parity: usize, columns: &[D]) -> Result<usize, ReconstructError> {
    if !(1..=MAX_PARITY).contains(&parity) {
        return Err(ReconstructError::InvalidParity(parity));
    }
    let n = columns.len().saturating_sub(parity);
    if n == 0 || n > MAX_DATA_COLUMNS {
        return Err(ReconstructError::BadLengths);
    }
    let len = columns[parity..]
        .iter()
        .map(|c| c.as_ref().len())
        .max()
        .unwrap_or(0);
    if columns[..parity].iter().any(|c| c.as_ref().len() != len) {
        return Err(ReconstructError::BadLengths);
    }
    Ok(len)
}

/// Computes the `parity` parity columns (P, then Q, then R) of `data` into
/// `parity_out`, exactly as OpenZFS does. Data columns may be shorter than
/// the parity columns; their missing tail counts as zero.
///
/// # Panics
/// Panics if `parity` is not 1..=3, `parity_out.len() != parity`, `data` is
/// empty or has more than [`MAX_DATA_COLUMNS`] columns, the parity columns
/// differ in length, or a data column is longer than the parity columns.
pub fn generate(parity: usize, data: &[&[u8]], parity_out: &mut [&mut [u8]]) {
    assert!(
        (1..=MAX_PARITY).contains(&parity),
        "parity {parity} not 1..=3"
    );
    assert_eq!(parity_out.len(), parity, "one output per parity column");
    assert!(
        !data.is_empty() && data.len() <= MAX_DATA_COLUMNS,
        "1..=255 data columns"
    );
    let len = parity_out[0].len();
    assert!(
        parity_out.iter().all(|p| p.len() == len),
        "parity columns differ in length"
    );
    assert!(
        data.iter().all(|d| d.len() <= len),
        "data column longer than parity"
    );
    let mut start = 0;
    while start < len {
        let end = (start + CHUNK).min(len);
        match parity_out {
            [p] => gen_rows_chunk(data, start, &mut [&mut p[start..end]]),
            [p, q] => gen_rows_chunk(data, start, &mut [&mut p[start..end], &mut q[start..end]]),
            [p, q, r] => gen_rows_chunk(
                data,
                start,
                &mut [&mut p[start..end], &mut q[start..end], &mut r[start..end]],
            ),
            _ => unreachable!(),
        }
        start = end;
    }
}

/// Returns the indices (0 = P, 1 = Q, 2 = R) of the parity columns that
/// disagree with the data columns; `columns` holds the parity columns then
/// the data columns, in map order. A parity column whose length differs from
/// the longest data column is reported as disagreeing.
///
/// # Panics
/// Panics if `parity` is not 1..=3 or there is no data column.
pub fn verify_parity(parity: usize, columns: &[&[u8]]) -> Vec<usize> {
    assert!(
        (1..=MAX_PARITY).contains(&parity),
        "parity {parity} not 1..=3"
    );
    assert!(columns.len() > parity, "no data column");
    let (par, data) = columns.split_at(parity);
    let len = data.iter().map(|d| d.len()).max().unwrap_or(0);
    let mut bad = [false; MAX_PARITY];
    for (r, p) in par.iter().enumerate() {
        bad[r] = p.len() != len;
    }
    let mut scratch = [[0u8; CHUNK]; MAX_PARITY];
    let mut start = 0;
    while start < len {
        let end = (start + CHUNK).min(len);
        let w = end - start;
        let [a, b, c] = &mut scratch;
        let outs: &mut [&mut [u8]] = &mut [&mut a[..w], &mut b[..w], &mut c[..w]];
        gen_rows_chunk(data, start, &mut outs[..parity]);
        for r in 0..parity {
            if !bad[r] && outs[r][..] != par[r][start..end] {
                bad[r] = true;
            }
        }
        start = end;
    }
    (0..parity).filter(|&r| bad[r]).collect()
}

/// Rebuilds the `missing` columns of a RAID-Z row in place.
///
/// `columns` holds all parity columns (P, Q, R as the level requires) and
/// then all data columns, in map order, with the map's unequal lengths
/// (parity columns as long as the longest data column). `missing` lists
/// indices into `columns` whose contents are unknown: at most `parity` of
/// them, any mix of parity and data columns. On success every missing column
/// holds its correct contents; present columns are not modified. Nothing is
/// modified when an error is returned.
///
/// # Errors
/// [`ReconstructError::InvalidParity`] if `parity` is not 1..=3,
/// [`ReconstructError::TooManyMissing`] if more than `parity` columns are
/// listed, [`ReconstructError::BadIndex`] for an index out of range or listed
/// twice, and [`ReconstructError::BadLengths`] if the column lengths do not
/// form a RAID-Z row (see the variant).
pub fn reconstruct(
    parity: usize,
    columns: &mut [&mut [u8]],
    missing: &[usize],
) -> Result<(), ReconstructError> {
    check_shape(parity, columns)?;
    let n = columns.len() - parity;
    if missing.len() > parity {
        return Err(ReconstructError::TooManyMissing {
            missing: missing.len(),
            parity,
        });
    }
    let mut is_missing = [false; MAX_PARITY + MAX_DATA_COLUMNS];
    for &m in missing {
        if m >= columns.len() || is_missing[m] {
            return Err(ReconstructError::BadIndex(m));
        }
        is_missing[m] = true;
    }
    if missing.is_empty() {
        return Ok(());
    }

    // Missing data columns (indices into `columns`), longest first.
    let mut md = [0usize; MAX_PARITY];
    let mut k = 0;
    for (c, _) in is_missing[..columns.len()]
        .iter()
        .enumerate()
        .skip(parity)
        .filter(|&(_, &gone)| gone)
    {
        md[k] = c;
        k += 1;
    }
    let md = &mut md[..k];
    md.sort_by_key(|&c| std::cmp::Reverse(columns[c].len()));
    // The first k parity rows still present solve for them.
    let mut rows = [0usize; MAX_PARITY];
    let mut nrows = 0;
    for (r, &gone) in is_missing.iter().enumerate().take(parity) {
        if !gone && nrows < k {
            rows[nrows] = r;
            nrows += 1;
        }
    }
    debug_assert_eq!(nrows, k, "at most `parity` columns are missing");

    if k > 0 {
        // Take the missing data buffers out so the rest can be read while
        // they are written; an empty slice in their place reads as zeros.
        let mut bufs: [&mut [u8]; MAX_PARITY] = Default::default();
        for (t, &c) in md.iter().enumerate() {
            bufs[t] = std::mem::take(&mut columns[c]);
        }
        solve_data(n, parity, columns, md, &rows[..k], &mut bufs[..k]);
        for (t, &c) in md.iter().enumerate() {
            columns[c] = std::mem::take(&mut bufs[t]);
        }
    }

    // Regenerate missing parity from the complete data.
    for r in 0..parity {
        if is_missing[r] {
            let out = std::mem::take(&mut columns[r]);
            gen_row(r, &columns[parity..], out);
            columns[r] = out;
        }
    }
    Ok(())
}

/// Fills `bufs[t]` (the missing data column `md[t]`, longest first) using
/// parity rows `rows`. The missing columns in `columns` are empty.
fn solve_data(
    n: usize,
    parity: usize,
    columns: &[&mut [u8]],
    md: &[usize],
    rows: &[usize],
    bufs: &mut [&mut [u8]],
) {
    // Syndromes: S_t = parity row t + row t over the present data, into the
    // t-th buffer (as far as that buffer reaches).
    for (t, buf) in bufs.iter_mut().enumerate() {
        gen_row(rows[t], &columns[parity..], buf);
        let p = &columns[rows[t]][..buf.len()];
        step1::<0>(buf, p);
    }
    // Solve segment by segment: within [x, len of the k'-th longest), the
    // k' longest missing columns are the unknowns.
    let mut scratch = [[0u8; CHUNK]; MAX_PARITY];
    let mut x = 0;
    let maxlen = bufs[0].len();
    while x < maxlen {
        let kk = bufs.iter().take_while(|b| b.len() > x).count();
        let seg_end = bufs[kk - 1].len();
        let mut a: Matrix = [[0; MAX_PARITY]; MAX_PARITY];
        for (t, row) in a.iter_mut().enumerate().take(kk) {
            for (u, e) in row.iter_mut().enumerate().take(kk) {
                *e = coefficient(rows[t], n, md[u] - parity);
            }
        }
        let inv = invert(&a, kk).expect("RAID-Z parity rows are independent");
        while x < seg_end {
            let end = (x + CHUNK).min(seg_end);
            let w = end - x;
            if kk == 1 {
                if inv[0][0] != 1 {
                    scratch[0][..w].copy_from_slice(&bufs[0][x..end]);
                    mul_const::<false>(&mut bufs[0][x..end], &scratch[0][..w], inv[0][0]);
                }
            } else {
                for t in 0..kk {
                    scratch[t][..w].copy_from_slice(&bufs[t][x..end]);
                }
                for (u, buf) in bufs.iter_mut().enumerate().take(kk) {
                    let out = &mut buf[x..end];
                    mul_const::<false>(out, &scratch[0][..w], inv[u][0]);
                    for t in 1..kk {
                        mul_const::<true>(out, &scratch[t][..w], inv[u][t]);
                    }
                }
            }
            x = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // ---- straightforward reference: per-byte log/exp arithmetic ----

    fn ref_tables() -> ([u8; 256], [u8; 256]) {
        static T: std::sync::OnceLock<([u8; 256], [u8; 256])> = std::sync::OnceLock::new();
        *T.get_or_init(build_ref_tables)
    }

    fn build_ref_tables() -> ([u8; 256], [u8; 256]) {
        let mut exp = [0u8; 256];
        let mut log = [0u8; 256];
        let mut x: u32 = 1;
        for (i, e) in exp.iter_mut().enumerate().take(255) {
            *e = x as u8;
            log[x as usize] = i as u8;
            x <<= 1;
            if x & 0x100 != 0 {
                x ^= 0x11d;
            }
        }
        (exp, log)
    }

    fn ref_mul(a: u8, b: u8) -> u8 {
        let (exp, log) = ref_tables();
        if a == 0 || b == 0 {
            0
        } else {
            exp[(log[a as usize] as usize + log[b as usize] as usize) % 255]
        }
    }

    /// Parity row `row` computed byte by byte as sum of 2^(row*(n-1-j)) d_j.
    fn ref_parity(row: usize, data: &[Vec<u8>]) -> Vec<u8> {
        let (exp, _) = ref_tables();
        let n = data.len();
        let len = data.iter().map(|d| d.len()).max().unwrap();
        let mut out = vec![0u8; len];
        for (j, d) in data.iter().enumerate() {
            let c = exp[(row * (n - 1 - j)) % 255];
            for (o, &b) in out.iter_mut().zip(d) {
                *o ^= ref_mul(c, b);
            }
        }
        out
    }

    fn gen_vec(parity: usize, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let len = data.iter().map(|d| d.len()).max().unwrap();
        let mut out = vec![vec![0u8; len]; parity];
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|o| &mut o[..]).collect();
        generate(parity, &refs, &mut outs);
        out
    }

    fn pseudo(seed: u64, len: usize) -> Vec<u8> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn field_tables() {
        assert_eq!(gf_pow2(8), 0x1d);
        assert_eq!(gf_pow2(255), 1);
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(gf_mul(a, b), ref_mul(a, b));
            }
            if a != 0 {
                assert_eq!(gf_mul(a, gf_inv(a)), 1);
            }
            let w = u64::from_ne_bytes([a; 8]);
            assert_eq!(mul2_word(w), u64::from_ne_bytes([gf_mul(a, 2); 8]));
        }
    }

    #[test]
    fn hand_computed_vectors() {
        // d = [0x80], [0x00], [0x01]:
        //   P = 0x81; Q = 4*0x80 + 1 = 0x3a ^ 1 = 0x3b;
        //   R = 16*0x80 + 1 = 2^11 + 1 = 0xe8 ^ 1 = 0xe9.
        let out = gen_vec(3, &[vec![0x80], vec![0x00], vec![0x01]]);
        assert_eq!(out, vec![vec![0x81], vec![0x3b], vec![0xe9]]);
        // Two columns of 1: P = 0, Q = 2 ^ 1 = 3, R = 4 ^ 1 = 5.
        let out = gen_vec(3, &[vec![1, 0x80], vec![1]]);
        // Second byte: only column 0 reaches it: P = 0x80, Q = 2*0x80 = 0x1d,
        // R = 4*0x80 = 0x3a.
        assert_eq!(out, vec![vec![0, 0x80], vec![3, 0x1d], vec![5, 0x3a]]);
    }

    #[test]
    fn generate_matches_reference_unequal_lengths() {
        for n in 1..=12 {
            for sector in [1usize, 7, 8, 64, 4096] {
                for big in 0..=n {
                    let data: Vec<Vec<u8>> = (0..n)
                        .map(|j| pseudo((n * 100 + j) as u64, sector * (2 + usize::from(j < big))))
                        .collect();
                    for parity in 1..=3 {
                        let out = gen_vec(parity, &data);
                        for (r, o) in out.iter().enumerate() {
                            assert_eq!(*o, ref_parity(r, &data), "n {n} row {r}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn generate_large_multi_chunk() {
        let data: Vec<Vec<u8>> = (0..6)
            .map(|j| pseudo(j, 3 * CHUNK + 512 * usize::from(j < 2) + 1000))
            .collect();
        let out = gen_vec(3, &data);
        for (r, o) in out.iter().enumerate() {
            assert_eq!(*o, ref_parity(r, &data));
        }
    }

    #[test]
    fn avx2_and_scalar_agree() {
        #[cfg(target_arch = "x86_64")]
        if have_avx2() {
            for c in 0..=255u8 {
                let (lo, hi) = nibble_tables(c);
                for len in [0usize, 1, 31, 32, 33, 100, 4096] {
                    let src = pseudo(u64::from(c) + len as u64, len);
                    let init = pseudo(7 + len as u64, len);
                    let mut a = init.clone();
                    let mut b = init.clone();
                    mul_scalar::<false>(&mut a, &src, &lo, &hi);
                    // SAFETY: AVX2 support was detected above.
                    unsafe { mul_avx2::<false>(&mut b, &src, &lo, &hi) };
                    assert_eq!(a, b);
                    let expect: Vec<u8> = src.iter().map(|&s| ref_mul(c, s)).collect();
                    assert_eq!(a, expect);
                    let mut a = init.clone();
                    let mut b = init.clone();
                    mul_scalar::<true>(&mut a, &src, &lo, &hi);
                    // SAFETY: AVX2 support was detected above.
                    unsafe { mul_avx2::<true>(&mut b, &src, &lo, &hi) };
                    assert_eq!(a, b);
                }
            }
        }
    }

    #[test]
    fn matrix_inverse() {
        for n in [3usize, 5, 255] {
            let m: Matrix = [
                [
                    coefficient(0, n, 0),
                    coefficient(0, n, 1),
                    coefficient(0, n, n - 1),
                ],
                [
                    coefficient(1, n, 0),
                    coefficient(1, n, 1),
                    coefficient(1, n, n - 1),
                ],
                [
                    coefficient(2, n, 0),
                    coefficient(2, n, 1),
                    coefficient(2, n, n - 1),
                ],
            ];
            let inv = invert(&m, 3).unwrap();
            let product: Vec<u8> = (0..9)
                .map(|ij| (0..3).fold(0, |s, x| s ^ gf_mul(m[ij / 3][x], inv[x][ij % 3])))
                .collect();
            assert_eq!(product, [1, 0, 0, 0, 1, 0, 0, 0, 1]);
        }
        assert!(invert(&[[1, 1, 0], [1, 1, 0], [0, 0, 0]], 2).is_none());
    }

    /// Columns (parity then data) for a map-shaped row.
    fn make_row(
        parity: usize,
        n: usize,
        sector: usize,
        q: usize,
        big: usize,
        seed: u64,
    ) -> Vec<Vec<u8>> {
        let data: Vec<Vec<u8>> = (0..n)
            .map(|j| {
                let len = if q == 0 || j < big {
                    (q + 1) * sector
                } else {
                    q * sector
                };
                pseudo(seed ^ ((j as u64 + 1) * 0x1234_5678), len)
            })
            .collect();
        let mut cols = gen_vec(parity, &data);
        cols.extend(data);
        cols
    }

    /// Every subset of at most `parity` columns: erase (garbage), rebuild,
    /// compare.
    fn check_all_erasures(parity: usize, cols: &[Vec<u8>]) {
        let total = cols.len();
        let mut subsets: Vec<Vec<usize>> = vec![vec![]];
        for a in 0..total {
            subsets.push(vec![a]);
            for b in a + 1..total {
                subsets.push(vec![a, b]);
                for c in b + 1..total {
                    subsets.push(vec![a, c, b]);
                }
            }
        }
        for missing in subsets.into_iter().filter(|s| s.len() <= parity) {
            let mut work = cols.to_vec();
            for &m in &missing {
                work[m].iter_mut().for_each(|b| *b = 0xa5);
            }
            let mut refs: Vec<&mut [u8]> = work.iter_mut().map(|c| &mut c[..]).collect();
            reconstruct(parity, &mut refs, &missing).unwrap();
            assert_eq!(work, cols, "missing {missing:?}");
        }
    }

    #[test]
    fn reconstruct_every_combination_fixed() {
        for parity in 1..=3 {
            for n in 1..=7 {
                for (q, big) in [(0, n), (1, 0), (1, 1), (2, n - 1), (3, n / 2)] {
                    let cols = make_row(parity, n, 16, q, big, (parity * 31 + n) as u64);
                    check_all_erasures(parity, &cols);
                }
            }
        }
    }

    #[test]
    fn reconstruct_large_and_non_monotonic_lengths() {
        // Multi-chunk columns.
        let cols = make_row(3, 6, 4096, 3, 2, 99);
        check_all_erasures(3, &cols);
        // Lengths in no particular order still work.
        let data = vec![
            pseudo(1, 40),
            pseudo(2, 64),
            pseudo(3, 8),
            pseudo(4, 64),
            pseudo(5, 0),
        ];
        let mut cols = gen_vec(3, &data);
        cols.extend(data);
        check_all_erasures(3, &cols);
    }

    #[test]
    fn reconstruct_errors() {
        let mut cols = make_row(2, 3, 8, 1, 1, 5);
        let orig = cols.clone();
        let mut refs: Vec<&mut [u8]> = cols.iter_mut().map(|c| &mut c[..]).collect();
        assert_eq!(
            reconstruct(2, &mut refs, &[0, 1, 2]),
            Err(ReconstructError::TooManyMissing {
                missing: 3,
                parity: 2
            })
        );
        assert_eq!(
            reconstruct(2, &mut refs, &[1, 1]),
            Err(ReconstructError::BadIndex(1))
        );
        assert_eq!(
            reconstruct(2, &mut refs, &[9]),
            Err(ReconstructError::BadIndex(9))
        );
        assert_eq!(
            reconstruct(4, &mut refs, &[0]),
            Err(ReconstructError::InvalidParity(4))
        );
        assert_eq!(
            reconstruct(2, &mut refs[..2], &[0]),
            Err(ReconstructError::BadLengths)
        );
        assert_eq!(reconstruct(2, &mut refs, &[]), Ok(()));
        drop(refs);
        assert_eq!(cols, orig);
        let mut bad = orig.clone();
        bad[1].pop();
        let mut refs: Vec<&mut [u8]> = bad.iter_mut().map(|c| &mut c[..]).collect();
        assert_eq!(
            reconstruct(2, &mut refs, &[2]),
            Err(ReconstructError::BadLengths)
        );
        assert!(!ReconstructError::BadLengths.to_string().is_empty());
        let e: Box<dyn std::error::Error> = Box::new(ReconstructError::BadIndex(3));
        assert!(e.to_string().contains('3'));
    }

    #[test]
    fn verify_parity_flags_corruption() {
        let cols = make_row(3, 5, 4096, 2, 3, 11);
        let refs: Vec<&[u8]> = cols.iter().map(|c| &c[..]).collect();
        assert!(verify_parity(3, &refs).is_empty());
        for r in 0..3 {
            let mut bad = cols.clone();
            let last = bad[r].len() - 1;
            bad[r][last] ^= 0x40;
            let refs: Vec<&[u8]> = bad.iter().map(|c| &c[..]).collect();
            assert_eq!(verify_parity(3, &refs), vec![r]);
        }
        // A corrupted data byte shows up in every parity column.
        let mut bad = cols.clone();
        bad[4][10] ^= 1;
        let refs: Vec<&[u8]> = bad.iter().map(|c| &c[..]).collect();
        assert_eq!(verify_parity(3, &refs), vec![0, 1, 2]);
    }

    fn row_case() -> impl Strategy<Value = (usize, usize, usize, usize, usize, u64)> {
        (1usize..=3, 1usize..=10, 8usize..=64, 0usize..=3).prop_flat_map(
            |(parity, n, sector, q)| {
                (
                    Just(parity),
                    Just(n),
                    Just(sector),
                    Just(q),
                    0..=n,
                    any::<u64>(),
                )
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn prop_reconstruct_all_subsets((parity, n, sector, q, big, seed) in row_case()) {
            let cols = make_row(parity, n, sector, q, big, seed);
            for (r, c) in cols[..parity].iter().enumerate() {
                prop_assert_eq!(c, &ref_parity(r, &cols[parity..]));
            }
            check_all_erasures(parity, &cols);
        }

        #[test]
        fn prop_verify_flags_exactly_corrupted_parity(
            (parity, n, sector, q, big, seed) in row_case(),
            which in 0usize..3,
            pos in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let mut cols = make_row(parity, n, sector, q, big, seed);
            let refs: Vec<&[u8]> = cols.iter().map(|c| &c[..]).collect();
            prop_assert!(verify_parity(parity, &refs).is_empty());
            let r = which % parity;
            let i = pos.index(cols[r].len());
            cols[r][i] ^= flip;
            let refs: Vec<&[u8]> = cols.iter().map(|c| &c[..]).collect();
            prop_assert_eq!(verify_parity(parity, &refs), vec![r]);
        }
    }
}
