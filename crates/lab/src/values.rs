//! Value contents with realistic compressibility, for servers that compress
//! (zExpander's Z-zone, SlimCache's flash tier) and for honest memory figures.
//!
//! zExpander (Wu et al., EuroSys'16, section 2.2 and Table 2) measured LZ4 on
//! two value sets: Twitter tweets (average 92 B, no gain individually, 1.41x in
//! 4 KB containers) and "Places" location records encoded with Protocol
//! Buffers with random field contents (average 100.9 B, 2..327 B, 1.28x
//! individually, 1.77x in 4 KB containers). We cannot ship those data sets, so
//! we generate look-alikes whose LZ4 ratios land near the paper's (docs/lab.md
//! prints ours next to Table 2; `cachalot-lab gen --compression-report`):
//! - `Text`: tweet-like text: words drawn from a Zipf law over a vocabulary of
//!   common English words and a long tail of made-up words, with mentions,
//!   hashtags and t.co links (random base-62, incompressible as in real
//!   tweets).
//! - `Proto`: protobuf wire-format records shaped like Twitter's Place (id,
//!   url containing the id, type, name, full name, country, centroid, bounding
//!   box), fields filled with random data as zExpander did.
//! - `Json`: JSON documents with repeated field names and mixed values.
//! - `Random`: incompressible bytes.
//!
//! Contents are a pure function of (kind, key, size), so a reader can check
//! what it got back.

use crate::workload::dist::{splitmix64, Rng, Zipf};

/// What values look like.
#[derive(
    clap::ValueEnum,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum ValueKind {
    /// Incompressible random bytes.
    #[default]
    Random,
    /// Text like short messages (zExpander's tweets, ~92 B).
    Text,
    /// Protobuf-like records (zExpander's "Places", ~100 B).
    Proto,
    /// JSON-like documents.
    Json,
}

impl ValueKind {
    pub const ALL: [ValueKind; 4] = [
        ValueKind::Text,
        ValueKind::Proto,
        ValueKind::Json,
        ValueKind::Random,
    ];

    fn stream(self) -> u64 {
        match self {
            ValueKind::Random => 0x7a01,
            ValueKind::Text => 0x7a02,
            ValueKind::Proto => 0x7a03,
            ValueKind::Json => 0x7a04,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ValueKind::Random => "random",
            ValueKind::Text => "text",
            ValueKind::Proto => "proto",
            ValueKind::Json => "json",
        }
    }
}

/// Fill `out` with exactly `size` bytes of value for object `key`:
/// deterministic in (kind, key, size), so a reader can verify what it gets.
pub fn value_bytes(kind: ValueKind, key: u64, size: usize, out: &mut Vec<u8>) {
    out.clear();
    let mut rng = Rng::new(key ^ (size as u64).rotate_left(32), kind.stream());
    match kind {
        ValueKind::Random => {
            while out.len() < size {
                out.extend_from_slice(&rng.next_u64().to_le_bytes());
            }
        }
        ValueKind::Text => {
            while out.len() < size {
                if !out.is_empty() {
                    out.push(b' ');
                }
                tweet(&mut rng, out, size);
            }
        }
        ValueKind::Proto => {
            while out.len() < size {
                place(&mut rng, out);
            }
        }
        ValueKind::Json => {
            while out.len() < size {
                if !out.is_empty() {
                    out.push(b'\n');
                }
                json_doc(&mut rng, out);
            }
        }
    }
    out.truncate(size);
}

/// The size a single natural value of this kind has for `key`: one tweet
/// (20..=164 B, mean 92), one Place record, one JSON document; 100 B of
/// random bytes. Models that want realistic per-key sizes use it.
pub fn natural_size(kind: ValueKind, key: u64) -> usize {
    let mut rng = Rng::new(key, kind.stream() ^ 0x5151);
    let mut out = Vec::new();
    match kind {
        ValueKind::Random => 100,
        ValueKind::Text => 20 + rng.below(145) as usize,
        ValueKind::Proto => {
            place(&mut rng, &mut out);
            out.len()
        }
        ValueKind::Json => {
            json_doc(&mut rng, &mut out);
            out.len()
        }
    }
}

// ---------------------------------------------------------------- text

/// The most common English words (function words first), the head of the
/// vocabulary's Zipf law.
const COMMON: &[&str] = &[
    "the",
    "I",
    "to",
    "a",
    "and",
    "is",
    "in",
    "it",
    "you",
    "of",
    "for",
    "on",
    "my",
    "that",
    "me",
    "be",
    "at",
    "with",
    "this",
    "have",
    "so",
    "just",
    "but",
    "are",
    "not",
    "was",
    "all",
    "we",
    "your",
    "get",
    "like",
    "up",
    "out",
    "do",
    "no",
    "what",
    "go",
    "now",
    "can",
    "love",
    "good",
    "day",
    "from",
    "will",
    "lol",
    "time",
    "about",
    "one",
    "today",
    "know",
    "if",
    "got",
    "new",
    "when",
    "how",
    "am",
    "its",
    "more",
    "back",
    "see",
    "want",
    "going",
    "u",
    "think",
    "night",
    "they",
    "he",
    "been",
    "people",
    "need",
    "there",
    "work",
    "oh",
    "great",
    "im",
    "some",
    "home",
    "would",
    "by",
    "really",
    "last",
    "dont",
    "off",
    "only",
    "our",
    "make",
    "should",
    "why",
    "happy",
    "morning",
    "still",
    "an",
    "right",
    "well",
    "much",
    "then",
    "has",
    "too",
    "who",
    "thanks",
    "here",
    "watching",
    "tonight",
    "had",
    "an",
    "new",
    "best",
    "ever",
    "tomorrow",
    "could",
    "first",
    "come",
    "life",
    "were",
    "week",
    "twitter",
    "lets",
    "fun",
    "show",
    "she",
    "her",
    "him",
    "game",
    "yes",
    "thank",
    "weekend",
    "them",
    "never",
    "sleep",
    "feel",
    "hope",
    "bad",
    "way",
    "said",
    "say",
    "music",
    "school",
    "free",
    "next",
    "little",
    "tweet",
    "always",
    "better",
    "long",
    "girl",
    "look",
    "live",
    "video",
    "photo",
    "after",
    "again",
    "ready",
    "check",
    "man",
    "ok",
    "watch",
    "nice",
    "even",
    "over",
    "did",
    "because",
    "wait",
    "hey",
    "soon",
    "Christmas",
    "year",
    "sure",
    "miss",
    "shit",
    "cool",
    "getting",
    "haha",
    "also",
    "world",
    "via",
    "via",
    "thing",
    "blog",
    "post",
    "news",
    "done",
    "help",
    "house",
    "friends",
];

/// Vocabulary size: the common words, then made-up words (a deterministic
/// syllable string per rank) for the long tail of names, slang and typos.
const VOCAB: u64 = 20_000;
/// Zipf exponent of word frequencies (natural language is close to 1).
const WORD_ZIPF: f64 = 1.3;
const SYLLABLES: &[&str] = &[
    "ka", "ro", "mi", "ta", "ne", "lo", "sa", "ve", "ri", "do", "pa", "li", "mo", "en", "ar", "st",
    "th", "ch", "er", "on", "an", "in", "us", "el", "ou", "ie", "ba", "gu", "fy", "zo",
];

fn word(rank: u64, out: &mut Vec<u8>) {
    if let Some(w) = COMMON.get(rank as usize) {
        out.extend_from_slice(w.as_bytes());
        return;
    }
    let mut h = splitmix64(rank);
    let n = 2 + (h % 3) as usize;
    for _ in 0..n {
        h = splitmix64(h);
        out.extend_from_slice(SYLLABLES[(h % SYLLABLES.len() as u64) as usize].as_bytes());
    }
}

const BASE62: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

fn random_chars(rng: &mut Rng, n: usize, out: &mut Vec<u8>) {
    for _ in 0..n {
        out.push(BASE62[rng.below(62) as usize]);
    }
}

/// Mentioned accounts: popular accounts are mentioned and retweeted often.
const ACCOUNTS: u64 = 100_000;

thread_local! {
    static WORDS: Zipf = Zipf::new(VOCAB, WORD_ZIPF);
    static USERS: Zipf = Zipf::new(ACCOUNTS, 1.0);
}

/// The screen name of account `rank`: 5..=12 base-62 characters from a hash.
fn user(rank: u64, out: &mut Vec<u8>) {
    let mut h = splitmix64(rank ^ 0xacc0);
    let n = 5 + (h % 8) as usize;
    for _ in 0..n {
        h = splitmix64(h);
        out.push(BASE62[(h % 62) as usize]);
    }
}

/// One tweet-like message, up to `limit` bytes past its start (it may end
/// earlier): words with Zipf frequencies, some mentions, hashtags and links.
fn tweet(rng: &mut Rng, out: &mut Vec<u8>, limit: usize) {
    let len = 20 + rng.below(145) as usize;
    let end = (out.len() + len).min(limit.max(out.len() + 1));
    let start = out.len();
    let mut first = true;
    while out.len() < end {
        if !first {
            out.push(b' ');
        }
        let r = rng.f64();
        if first && r < 0.15 {
            out.extend_from_slice(b"RT @");
            USERS.with(|z| user(z.sample(rng), out));
            out.push(b':');
        } else if r < 0.05 {
            out.push(b'@');
            USERS.with(|z| user(z.sample(rng), out));
        } else if r < 0.07 {
            // 2009-10 tweets (the paper's data set) shortened links with bit.ly.
            out.extend_from_slice(b"http://bit.ly/");
            random_chars(rng, 6, out);
        } else if r < 0.09 {
            out.push(b'#');
            WORDS.with(|z| word(z.sample(rng) - 1 + 30, out));
        } else {
            WORDS.with(|z| word(z.sample(rng) - 1, out));
            if rng.f64() < 0.08 {
                out.push([b'!', b'.', b',', b'?'][rng.below(4) as usize]);
            }
        }
        first = false;
    }
    if out.len() == start {
        out.push(b'.');
    }
}

// ---------------------------------------------------------------- protobuf

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(field: u32, wire: u8, out: &mut Vec<u8>) {
    varint(((field as u64) << 3) | wire as u64, out);
}

fn pb_bytes(field: u32, data: &[u8], out: &mut Vec<u8>) {
    tag(field, 2, out);
    varint(data.len() as u64, out);
    out.extend_from_slice(data);
}

fn pb_double(field: u32, v: f64, out: &mut Vec<u8>) {
    tag(field, 1, out);
    out.extend_from_slice(&v.to_le_bytes());
}

const PLACE_TYPES: &[&str] = &["city", "admin", "country", "neighborhood", "poi"];
const COUNTRIES: &[(&str, &str)] = &[
    ("US", "United States"),
    ("GB", "United Kingdom"),
    ("BR", "Brasil"),
    ("JP", "Japan"),
    ("ID", "Indonesia"),
    ("FR", "France"),
    ("ES", "Spain"),
    ("MX", "Mexico"),
];

fn lower_word(rng: &mut Rng, n: usize, out: &mut Vec<u8>) {
    for i in 0..n {
        let c = b'a' + rng.below(26) as u8;
        out.push(if i == 0 { c.to_ascii_uppercase() } else { c });
    }
}

/// One Place-like record in protobuf wire format. Optional fields make the
/// size vary (a record may be nearly empty); coordinates are random doubles
/// and the bounding box repeats them, as a real box's corners do.
fn place(rng: &mut Rng, out: &mut Vec<u8>) {
    let mut id = Vec::with_capacity(16);
    for _ in 0..16 {
        id.push(b"0123456789abcdef"[rng.below(16) as usize]);
    }
    if rng.f64() < 0.9 {
        pb_bytes(1, &id, out);
    }
    if rng.f64() < 0.8 {
        let mut url = b"https://api.twitter.com/1/geo/id/".to_vec();
        url.extend_from_slice(&id);
        url.extend_from_slice(b".json");
        pb_bytes(2, &url, out);
    }
    if rng.f64() < 0.6 {
        let t = PLACE_TYPES[rng.below(PLACE_TYPES.len() as u64) as usize];
        pb_bytes(3, t.as_bytes(), out);
    }
    let mut name = Vec::new();
    let n = 3 + rng.below(6) as usize;
    lower_word(rng, n, &mut name);
    if rng.f64() < 0.85 {
        pb_bytes(4, &name, out);
    }
    let (cc, country) = COUNTRIES[rng.below(COUNTRIES.len() as u64) as usize];
    if rng.f64() < 0.5 {
        let mut full = name.clone();
        full.extend_from_slice(b", ");
        full.extend_from_slice(cc.as_bytes());
        pb_bytes(5, &full, out);
    }
    if rng.f64() < 0.8 {
        pb_bytes(6, cc.as_bytes(), out);
    }
    if rng.f64() < 0.3 {
        pb_bytes(7, country.as_bytes(), out);
    }
    let lat = rng.f64() * 180.0 - 90.0;
    let lon = rng.f64() * 360.0 - 180.0;
    if rng.f64() < 0.1 {
        pb_double(8, lat, out);
        pb_double(9, lon, out);
    }
    if rng.f64() < 0.15 {
        // bounding_box { type: "Polygon", repeated point { lat, lon } }: a
        // closed GeoJSON ring of four corners, the first repeated at the end.
        let (dlat, dlon) = (rng.f64(), rng.f64());
        let mut bb = Vec::new();
        pb_bytes(2, b"Polygon", &mut bb);
        for (a, b) in [
            (lat, lon),
            (lat + dlat, lon),
            (lat + dlat, lon + dlon),
            (lat, lon + dlon),
            (lat, lon),
        ] {
            let mut pt = Vec::new();
            pb_double(1, a, &mut pt);
            pb_double(2, b, &mut pt);
            pb_bytes(1, &pt, &mut bb);
        }
        pb_bytes(10, &bb, out);
    }
    if out.is_empty() || rng.f64() < 0.05 {
        // A record with only its (small) numeric attribute.
        tag(11, 0, out);
        varint(rng.below(1 << 14), out);
    }
}

// ---------------------------------------------------------------- json

const JSON_LANGS: &[&str] = &["en", "es", "pt", "ja", "fr", "id"];

/// One JSON document: an object with stable field names, numbers, short
/// strings, a nested object and an array, like an API response cached whole.
fn json_doc(rng: &mut Rng, out: &mut Vec<u8>) {
    use std::io::Write;
    let id = rng.below(1 << 40);
    let _ = write!(out, "{{\"id\":{id},\"user\":{{\"name\":\"");
    let n = 4 + rng.below(8) as usize;
    lower_word(rng, n, out);
    let _ = write!(
        out,
        "\",\"followers\":{},\"verified\":{}}},\"text\":\"",
        rng.below(100_000),
        rng.f64() < 0.1
    );
    let n = out.len() + 30 + rng.below(90) as usize;
    tweet(rng, out, n);
    let _ = write!(
        out,
        "\",\"lang\":\"{}\",\"retweets\":{},\"favorites\":{},\"created_at\":\"2024-{:02}-{:02}T{:02}:{:02}:{:02}Z\",\"tags\":[",
        JSON_LANGS[rng.below(JSON_LANGS.len() as u64) as usize],
        rng.below(1000),
        rng.below(5000),
        1 + rng.below(12),
        1 + rng.below(28),
        rng.below(24),
        rng.below(60),
        rng.below(60)
    );
    for i in 0..rng.below(4) {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        WORDS.with(|z| word(z.sample(rng) - 1 + 30, out));
        out.push(b'"');
    }
    let _ = write!(out, "],\"score\":{:.4}}}", rng.f64() * 100.0);
}

// ---------------------------------------------------------------- report

/// zExpander's Table 2: LZ4 ratios individually and in 256 B .. 4 KB containers.
pub const CONTAINERS: [usize; 5] = [256, 512, 1024, 2048, 4096];
pub const ZEXPANDER_TWEETS: [f64; 6] = [0.99, 1.10, 1.21, 1.30, 1.34, 1.41];
pub const ZEXPANDER_PLACES: [f64; 6] = [1.28, 1.28, 1.45, 1.60, 1.70, 1.77];

/// One row of the compression report.
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
pub struct ReportRow {
    pub kind: ValueKind,
    pub mean_value_size: f64,
    /// Individual, then one per [`CONTAINERS`] size.
    pub ratios: Vec<f64>,
    /// zExpander's figures for the data set this kind imitates, if any.
    pub zexpander: Option<Vec<f64>>,
}

/// LZ4 ratio (uncompressed / compressed) of values compressed one by one.
pub fn individual_ratio(values: &[Vec<u8>]) -> f64 {
    let raw: usize = values.iter().map(|v| v.len()).sum();
    let packed: usize = values
        .iter()
        .map(|v| lz4_flex::block::compress(v).len())
        .sum();
    raw as f64 / packed.max(1) as f64
}

/// LZ4 ratio when values are packed whole, in order, into containers of
/// `container` bytes (a value that does not fit starts the next container),
/// each container compressed as one block, as zExpander's Z-zone does.
pub fn container_ratio(values: &[Vec<u8>], container: usize) -> f64 {
    let blocks = pack(values.iter().map(Vec::as_slice), container);
    let raw: usize = blocks.iter().map(Vec::len).sum();
    let packed: usize = blocks
        .iter()
        .map(|b| lz4_flex::block::compress(b).len())
        .sum();
    raw as f64 / packed.max(1) as f64
}

/// Values packed whole, in order, into containers of `container` bytes (a
/// value that does not fit starts the next one; none is empty).
fn pack<'a>(values: impl Iterator<Item = &'a [u8]>, container: usize) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for v in values {
        match out.last_mut() {
            Some(last) if last.len() + v.len() <= container => last.extend_from_slice(v),
            _ => out.push(v.to_vec()),
        }
    }
    out
}

/// The report over `n` natural-size values of each kind.
pub fn compression_report(n: u64) -> Vec<ReportRow> {
    ValueKind::ALL
        .iter()
        .map(|&kind| {
            let values = natural_values(kind, 0, n);
            let mean = values.iter().map(|v| v.len()).sum::<usize>() as f64 / n.max(1) as f64;
            let mut ratios = vec![individual_ratio(&values)];
            ratios.extend(CONTAINERS.iter().map(|&c| container_ratio(&values, c)));
            let zexpander = match kind {
                ValueKind::Text => Some(ZEXPANDER_TWEETS.to_vec()),
                ValueKind::Proto => Some(ZEXPANDER_PLACES.to_vec()),
                _ => None,
            };
            ReportRow {
                kind,
                mean_value_size: mean,
                ratios,
                zexpander,
            }
        })
        .collect()
}

pub fn format_report(rows: &[ReportRow]) -> String {
    let mut s = String::new();
    s.push_str("LZ4 (lz4_flex block) compression ratio = uncompressed / compressed\n");
    s.push_str(&format!(
        "{:<24} {:>9} {:>10} {:>6} {:>6} {:>6} {:>6} {:>6}\n",
        "values", "mean size", "individual", "256B", "512B", "1KB", "2KB", "4KB"
    ));
    let line = |label: &str, mean: String, r: &[f64]| {
        let mut l = format!("{label:<24} {mean:>9} {:>10.2}", r[0]);
        for x in &r[1..] {
            l.push_str(&format!(" {x:>6.2}"));
        }
        l.push('\n');
        l
    };
    for row in rows {
        let label = format!("cachalot-lab {}", row.kind.name());
        s.push_str(&line(
            &label,
            format!("{:.1} B", row.mean_value_size),
            &row.ratios,
        ));
        if let Some(z) = &row.zexpander {
            let label = match row.kind {
                ValueKind::Text => "zExpander Tweets",
                _ => "zExpander Places",
            };
            let mean = if row.kind == ValueKind::Text {
                "92 B"
            } else {
                "100.9 B"
            };
            s.push_str(&line(label, mean.to_string(), z));
        }
    }
    s
}

// ---------------------------------------------------------- codec report

/// One codec on one kind of values, packed into blocks as the Z-zone packs
/// them (`codec_report`).
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
pub struct CodecRow {
    pub kind: ValueKind,
    pub codec: &'static str,
    /// Uncompressed / stored bytes (a block that does not shrink is stored
    /// as it is).
    pub ratio: f64,
    /// Uncompressed MB per second through compression and decompression,
    /// one thread.
    pub compress_mb_s: f64,
    pub decompress_mb_s: f64,
    /// The dictionary's bytes, if the codec uses one.
    pub dict_bytes: usize,
}

/// `n` values of `kind` at their natural sizes, keys `from..`.
fn natural_values(kind: ValueKind, from: u64, n: u64) -> Vec<Vec<u8>> {
    (from..from + n)
        .map(|k| {
            let mut v = Vec::new();
            value_bytes(kind, k, natural_size(kind, k), &mut v);
            v
        })
        .collect()
}

/// Seconds per pass of `f`, repeated for at least `min_secs`.
fn time_per_pass(min_secs: f64, mut f: impl FnMut()) -> f64 {
    let start = std::time::Instant::now();
    let mut passes = 0u32;
    while passes == 0 || start.elapsed().as_secs_f64() < min_secs {
        f();
        passes += 1;
    }
    start.elapsed().as_secs_f64() / passes as f64
}

/// The Z-zone's codecs (`cachalot_engine::codec`) on `n` values of each
/// kind in blocks of `block` bytes: LZ4, zstd, and zstd with a dictionary of
/// `dict_bytes` trained on 2000 other values of the kind. Every block is
/// decoded back and compared; each timing repeats for `min_secs`.
pub fn codec_report(
    n: u64,
    block: usize,
    dict_bytes: usize,
    min_secs: f64,
) -> anyhow::Result<Vec<CodecRow>> {
    use cachalot_engine::codec::{train_dictionary, Codec, Coder, Dictionary};
    let mut rows = Vec::new();
    for kind in ValueKind::ALL {
        let values = natural_values(kind, 0, n);
        let blocks = pack(values.iter().map(Vec::as_slice), block);
        let raw: usize = blocks.iter().map(Vec::len).sum();
        let samples = natural_values(kind, 1_000_000, 2_000);
        let dict = train_dictionary(&samples, dict_bytes).map(|d| Dictionary::new(1, d));
        let mut configs = vec![("lz4", Codec::Lz4, None), ("zstd", Codec::Zstd, None)];
        if let Some(d) = &dict {
            configs.push(("zstd+dict", Codec::Zstd, Some(d)));
        }
        for (name, codec, d) in configs {
            let mut coder = Coder::default();
            let mut stored: Vec<(Codec, Vec<u8>)> = Vec::with_capacity(blocks.len());
            let compress_s = time_per_pass(min_secs, || {
                stored.clear();
                for b in &blocks {
                    let mut z = Vec::new();
                    if coder.compress(codec, d, b, &mut z) {
                        stored.push((codec, z));
                    } else {
                        stored.push((Codec::Raw, b.clone()));
                    }
                }
            });
            let mut out = Vec::new();
            for ((c, z), b) in stored.iter().zip(&blocks) {
                coder
                    .decompress(*c, d, z, b.len(), &mut out)
                    .map_err(|e| anyhow::anyhow!("{name} on {}: {e}", kind.name()))?;
                anyhow::ensure!(&out == b, "{name} on {}: block changed", kind.name());
            }
            let decompress_s = time_per_pass(min_secs, || {
                for ((c, z), b) in stored.iter().zip(&blocks) {
                    let _ = coder.decompress(*c, d, z, b.len(), &mut out);
                }
            });
            let kept: usize = stored.iter().map(|(_, z)| z.len()).sum();
            rows.push(CodecRow {
                kind,
                codec: name,
                ratio: raw as f64 / kept.max(1) as f64,
                compress_mb_s: raw as f64 / compress_s / 1e6,
                decompress_mb_s: raw as f64 / decompress_s / 1e6,
                dict_bytes: d.map_or(0, |d| d.bytes().len()),
            });
        }
    }
    Ok(rows)
}

pub fn format_codec_report(rows: &[CodecRow], block: usize) -> String {
    let mut s = format!(
        "codecs on {block} B blocks: ratio = uncompressed / stored, MB/s of uncompressed bytes, one thread\n"
    );
    s.push_str(&format!(
        "{:<8} {:<10} {:>6} {:>12} {:>14} {:>10}\n",
        "values", "codec", "ratio", "compress", "decompress", "dictionary"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:<8} {:<10} {:>6.2} {:>7.0} MB/s {:>9.0} MB/s {:>8} B\n",
            r.kind.name(),
            r.codec,
            r.ratio,
            r.compress_mb_s,
            r.decompress_mb_s,
            r.dict_bytes
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codecs_round_trip_and_rank_as_expected() {
        let rows = codec_report(400, 2048, 8192, 0.0).unwrap();
        let ratio = |kind, codec| {
            rows.iter()
                .find(|r| r.kind == kind && r.codec == codec)
                .map(|r| r.ratio)
                .unwrap()
        };
        // Random values are stored as they are, whatever the codec.
        for codec in ["lz4", "zstd"] {
            assert!((ratio(ValueKind::Random, codec) - 1.0).abs() < 0.01);
        }
        // zstd beats LZ4 on structured records, and a dictionary helps.
        for kind in [ValueKind::Proto, ValueKind::Json] {
            assert!(ratio(kind, "zstd") > ratio(kind, "lz4"), "{kind:?}");
            assert!(ratio(kind, "zstd+dict") > ratio(kind, "zstd"), "{kind:?}");
        }
    }

    #[test]
    fn exact_size_and_deterministic() {
        for kind in ValueKind::ALL {
            for size in [0usize, 1, 2, 7, 92, 100, 1000, 5000] {
                let mut a = Vec::new();
                let mut b = Vec::new();
                value_bytes(kind, 42, size, &mut a);
                value_bytes(kind, 42, size, &mut b);
                assert_eq!(a.len(), size, "{kind:?} {size}");
                assert_eq!(a, b);
            }
            let mut a = Vec::new();
            let mut b = Vec::new();
            value_bytes(kind, 1, 500, &mut a);
            value_bytes(kind, 2, 500, &mut b);
            assert_ne!(a, b, "{kind:?}: key has no effect");
        }
    }

    #[test]
    fn natural_sizes_match_the_papers_data_sets() {
        let n = 20_000;
        let mean =
            |k: ValueKind| (0..n).map(|i| natural_size(k, i)).sum::<usize>() as f64 / n as f64;
        let text = mean(ValueKind::Text);
        assert!((text - 92.0).abs() < 2.0, "{text}");
        let proto = mean(ValueKind::Proto);
        assert!((proto - 100.9).abs() < 6.0, "{proto}");
        let sizes: Vec<usize> = (0..n).map(|i| natural_size(ValueKind::Proto, i)).collect();
        assert!(
            sizes.iter().all(|&s| (2..=327).contains(&s)),
            "{:?}",
            sizes.iter().max()
        );
    }

    #[test]
    fn compressibility_ranks_like_the_paper() {
        let rows = compression_report(3_000);
        let get = |k: ValueKind| rows.iter().find(|r| r.kind == k).map(|r| r.ratios.clone());
        let (text, proto, random) = (
            get(ValueKind::Text).unwrap(),
            get(ValueKind::Proto).unwrap(),
            get(ValueKind::Random).unwrap(),
        );
        // Random bytes never compress.
        assert!(random.iter().all(|&r| r < 1.0), "{random:?}");
        // Bigger containers compress better (the paper's point).
        for r in [&text, &proto] {
            assert!(r[5] > r[1] && r[1] >= r[0] * 0.95, "{r:?}");
        }
        // Within 0.2 of zExpander's Table 2 at every container size.
        for (ours, theirs) in [(&text, ZEXPANDER_TWEETS), (&proto, ZEXPANDER_PLACES)] {
            for i in 0..6 {
                assert!((ours[i] - theirs[i]).abs() < 0.2, "{ours:?} vs {theirs:?}");
            }
        }
    }

    #[test]
    fn container_packing_counts_every_byte() {
        let vals = vec![vec![b'a'; 100], vec![b'b'; 200], vec![b'c'; 50]];
        // Same content in one container or three compresses differently.
        let one = container_ratio(&vals, 4096);
        let three = container_ratio(&vals, 100);
        assert!(one > three);
        assert!(individual_ratio(&vals) > 1.0);
    }
}
