//! Typical session data of web frameworks, as JSON maps: what the advisor
//! plans for and the benchmarks store.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A shape of session data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// `{"user_id": <integer>}`: the identity alone.
    IdentityOnly,
    /// axum-login's data with a 32-byte digest as `auth_hash`:
    /// `{"axum-login.data": {"user_id", "auth_hash"}}`.
    AxumLoginDigest,
    /// axum-login's data with the 97-byte argon2 password-hash string its
    /// examples return from `session_auth_hash`.
    AxumLoginPasswordHash,
    /// Django's login session (`django.contrib.auth`): user id as a
    /// string, the backend's dotted path, a 64-hex-digit session hash.
    Django,
    /// What a real axum-login app's session carries beyond the login: the
    /// digest profile with a csrf token (64 hex digits), a locale and a
    /// flash message. 132 bytes.
    AxumLoginApp,
    /// The app session with 226 characters of text more (a draft, a
    /// message: words, as people write them). 361 bytes.
    AxumLoginAppText,
}

impl Profile {
    /// Every profile, in report order.
    pub const ALL: [Self; 6] = [
        Self::IdentityOnly,
        Self::AxumLoginDigest,
        Self::AxumLoginPasswordHash,
        Self::Django,
        Self::AxumLoginApp,
        Self::AxumLoginAppText,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::IdentityOnly => "identity-only",
            Self::AxumLoginDigest => "axum-login-digest",
            Self::AxumLoginPasswordHash => "axum-login-password-hash",
            Self::Django => "django",
            Self::AxumLoginApp => "axum-login-app",
            Self::AxumLoginAppText => "axum-login-app-text",
        }
    }

    /// The data of the `n`-th session: a user id and hashes that vary with
    /// `n` (user ids 1,000,000 and up, as a busy site's are).
    pub fn data(self, n: u64) -> HashMap<String, Value> {
        let user = 1_000_000 + n % 9_000_000;
        // Digests and tokens are random: no pattern a compressor could use.
        let bytes = |len: usize| -> Vec<u8> {
            (0..len as u64)
                .map(|i| splitmix64(n.wrapping_mul(1 << 16).wrapping_add(i)) as u8)
                .collect()
        };
        let b64 = |len: usize| -> String {
            const ALPHABET: &[u8] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            bytes(len)
                .iter()
                .map(|b| ALPHABET[usize::from(b % 64)] as char)
                .collect()
        };
        let value = match self {
            Self::IdentityOnly => json!({ "user_id": user }),
            Self::AxumLoginDigest => {
                json!({ "axum-login.data": { "user_id": user, "auth_hash": bytes(32) } })
            }
            Self::AxumLoginPasswordHash => {
                // "$argon2id$v=19$m=19456,t=2,p=1$" + 22 + "$" + 43 = 97 bytes.
                let phc = format!("$argon2id$v=19$m=19456,t=2,p=1${}${}", b64(22), b64(43));
                json!({ "axum-login.data": { "user_id": user, "auth_hash": phc.into_bytes() } })
            }
            Self::Django => json!({
                "_auth_user_id": user.to_string(),
                "_auth_user_backend": "django.contrib.auth.backends.ModelBackend",
                "_auth_user_hash": hex::encode(bytes(32)),
            }),
            Self::AxumLoginApp | Self::AxumLoginAppText => {
                let pick = |options: &[&'static str], salt: u64| {
                    options[(n.wrapping_mul(0x9e37_79b9).wrapping_add(salt) >> 3) as usize
                        % options.len()]
                };
                let mut app = json!({
                    "axum-login.data": { "user_id": user, "auth_hash": bytes(32) },
                    // A token of its own, not the digest's bytes again.
                    "csrf_token": hex::encode(bytes(48).split_off(16)),
                    "locale": pick(&["en-US", "de-DE", "fr-FR", "en-GB", "pt-BR"], 1),
                    "flash": pick(&["Welcome back", "Item removed", "Order placed"], 2),
                });
                if self == Self::AxumLoginAppText {
                    app["messages"] = text(n, TEXT_CHARS).into();
                }
                app
            }
        };
        serde_json::from_value(value).unwrap_or_default()
    }
}

/// A well-mixed 64-bit hash of `x` (SplitMix64's finalizer).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Characters of text the `axum-login-app-text` profile adds.
const TEXT_CHARS: usize = 226;

/// `len` characters of words, different for each `n`.
fn text(n: u64, len: usize) -> String {
    const WORDS: &[&str] = &[
        "the", "order", "was", "shipped", "to", "your", "address", "and", "will", "arrive",
        "within", "three", "days", "please", "check", "account", "for", "updates", "on",
        "delivery", "status", "we", "have", "received", "payment", "thank", "you", "shopping",
        "with", "us", "today", "new", "items", "in", "cart", "saved", "later", "review",
    ];
    let mut state = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut out = String::with_capacity(len + 16);
    while out.len() < len {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(WORDS[(state >> 33) as usize % WORDS.len()]);
    }
    out.truncate(len);
    out
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|p| p.name()).collect();
                format!("unknown profile {s:?}; one of {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionpack::json_map;

    #[test]
    fn profiles_have_the_documented_sizes() {
        let sizes: Vec<usize> = Profile::ALL
            .iter()
            .map(|p| json_map::encode(&p.data(12_345)).unwrap().len())
            .collect();
        // identity: map, code, uint32; digest: 40 + 4 for the uint32 id;
        // password hash: 32-byte bin -> 97-byte bin; Django: three codes,
        // "1012345", the 41-byte backend path, 64 hex digits.
        // App: 44 + csrf (code, str8 of 64) + locale (code, fixstr of 5)
        // + flash (code, fixstr of 12); text: + messages (code, str8 of 226).
        assert_eq!(
            sizes,
            [7, 44, 109, 1 + 3 + 8 + 43 + 66, 44 + 67 + 7 + 14, 132 + 229]
        );
        let phc = &Profile::AxumLoginPasswordHash.data(1)["axum-login.data"]["auth_hash"];
        assert_eq!(phc.as_array().unwrap().len(), 97);
    }

    #[test]
    fn names_parse_back() {
        for p in Profile::ALL {
            assert_eq!(p.name().parse::<Profile>().unwrap(), p);
        }
    }
}

/// A shape of actix-session state: keys to JSON texts, as
/// `Session::insert` and actix-identity write them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ActixProfile {
    /// actix-identity's user id alone: `{"actix_identity.user_id": "\"…\""}`.
    UserId,
    /// The user id with actix-identity's login and last-visit stamps
    /// (`login_deadline`, `visit_deadline` set).
    #[value(name = "user-id-stamps")]
    Stamps,
    /// The stamped login with a csrf token (64 hex digits), a locale and a
    /// flash message: a real app's session.
    App,
    /// The app session with 300 characters of text more.
    AppText,
}

impl ActixProfile {
    /// Every profile, in report order.
    pub const ALL: [Self; 4] = [Self::UserId, Self::Stamps, Self::App, Self::AppText];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::UserId => "user-id",
            Self::Stamps => "user-id-stamps",
            Self::App => "app",
            Self::AppText => "app-text",
        }
    }

    /// The state of the `n`-th session (user ids 1,000,000 and up;
    /// stamps around November 2026).
    pub fn state(self, n: u64) -> HashMap<String, String> {
        let user = 1_000_000 + n % 9_000_000;
        let stamp = 1_795_000_000 + n % 1_000_000;
        let mut state = HashMap::new();
        let mut put = |key: &str, value: Value| {
            state.insert(key.to_owned(), value.to_string());
        };
        put("actix_identity.user_id", Value::String(user.to_string()));
        if self != Self::UserId {
            put("actix_identity.logged_in_at", stamp.into());
            put("actix_identity.last_visited_at", (stamp + 60).into());
        }
        if matches!(self, Self::App | Self::AppText) {
            let token: Vec<u8> = (0..32u64)
                .map(|i| splitmix64(n.wrapping_mul(1 << 16).wrapping_add(i)) as u8)
                .collect();
            let pick = |options: &[&'static str], salt: u64| {
                options
                    [(n.wrapping_mul(0x9e37_79b9).wrapping_add(salt) >> 3) as usize % options.len()]
            };
            put("csrf_token", hex::encode(token).into());
            put(
                "locale",
                pick(&["en-US", "de-DE", "fr-FR", "en-GB", "pt-BR"], 1).into(),
            );
            put(
                "flash",
                json!({ "level": "info", "text": pick(&["Welcome back", "Item removed", "Order placed"], 2) }),
            );
        }
        if self == Self::AppText {
            put("messages", text(n, 300).into());
        }
        state
    }
}

impl std::fmt::Display for ActixProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
