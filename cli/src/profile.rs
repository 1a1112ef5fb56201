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
    /// The app session with 226 characters more, drawn at random from
    /// letters, digits and space (free text, a token blob: nothing a
    /// compressor has seen before). 361 bytes.
    AxumLoginAppText,
    /// A shop's session: the login, a csrf token, a currency and a cart of
    /// two to five items (a random SKU, a quantity, a price), with the time
    /// it was last changed. About 250 bytes.
    ShopCart,
    /// A login through an OAuth provider: the login, a csrf token, the
    /// provider's name, the subject and email it gave, its access and
    /// refresh tokens (random base64url) and their expiry. About 480
    /// bytes.
    OAuthLogin,
    /// A multi-tenant app's login: the user and the tenant as random
    /// UUIDs (version 4, in their 36-character text form), the digest, a
    /// csrf token, a role, the client's IP address and when it was last
    /// seen (an ISO 8601 time). About 240 bytes.
    TenantLogin,
    /// A login through OpenID Connect that keeps its id token: the login,
    /// a csrf token, and a JSON Web Token signed with RS256 (base64url of
    /// a JSON header naming one of two keys, of JSON claims with a random
    /// subject, nonce, name and email, and of a random 256-byte
    /// signature), with its expiry. About 1,110 bytes.
    OidcLogin,
}

impl Profile {
    /// Every profile, in report order.
    pub const ALL: [Self; 10] = [
        Self::IdentityOnly,
        Self::AxumLoginDigest,
        Self::AxumLoginPasswordHash,
        Self::Django,
        Self::AxumLoginApp,
        Self::AxumLoginAppText,
        Self::ShopCart,
        Self::OAuthLogin,
        Self::TenantLogin,
        Self::OidcLogin,
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
            Self::ShopCart => "shop-cart",
            Self::OAuthLogin => "oauth-login",
            Self::TenantLogin => "tenant-login",
            Self::OidcLogin => "oidc-login",
        }
    }

    /// The data of the `n`-th session: a user id and hashes that vary with
    /// `n` (user ids 1,000,000 and up, as a busy site's are).
    pub fn data(self, n: u64) -> HashMap<String, Value> {
        let user = 1_000_000 + n % 9_000_000;
        // Digests and tokens are random: no pattern a compressor could use,
        // each from a stream of its own (`salt`), so no two share bytes.
        let bytes = |salt: u64, len: usize| -> Vec<u8> {
            (0..len as u64)
                .map(|i| splitmix64(n.wrapping_mul(1 << 16).wrapping_add(i) ^ (salt << 48)) as u8)
                .collect()
        };
        let b64 = |salt: u64, len: usize| -> String {
            const ALPHABET: &[u8] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            bytes(salt, len)
                .iter()
                .map(|b| ALPHABET[usize::from(b % 64)] as char)
                .collect()
        };
        // Base64url, as OAuth providers write their tokens, drawn from a
        // stream of its own (`salt`).
        let b64url = |salt: u64, len: usize| -> String {
            const ALPHABET: &[u8] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            (0..len as u64)
                .map(|i| {
                    let r = splitmix64(n.wrapping_mul(1 << 20) ^ (salt << 12) ^ i);
                    ALPHABET[(r % 64) as usize] as char
                })
                .collect()
        };
        // A random (version 4) UUID from a stream of its own.
        let uuid = |salt: u64| {
            let mut b = bytes(salt, 16);
            b[6] = 0x40 | (b[6] & 0x0f);
            b[8] = 0x80 | (b[8] & 0x3f);
            let h = hex::encode(b);
            format!(
                "{}-{}-{}-{}-{}",
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            )
        };
        // A number below `max` from a stream of its own.
        let draw = |salt: u64, max: u64| splitmix64(n.wrapping_mul(0x1_0001) ^ (salt << 40)) % max;
        let pick = |options: &[&'static str], salt: u64| {
            options[(n.wrapping_mul(0x9e37_79b9).wrapping_add(salt) >> 3) as usize % options.len()]
        };
        let value = match self {
            Self::IdentityOnly => json!({ "user_id": user }),
            Self::AxumLoginDigest => {
                json!({ "axum-login.data": { "user_id": user, "auth_hash": bytes(0, 32) } })
            }
            Self::AxumLoginPasswordHash => {
                // "$argon2id$v=19$m=19456,t=2,p=1$" + 22 + "$" + 43 = 97 bytes.
                let phc = format!(
                    "$argon2id$v=19$m=19456,t=2,p=1${}${}",
                    b64(1, 22),
                    b64(2, 43)
                );
                json!({ "axum-login.data": { "user_id": user, "auth_hash": phc.into_bytes() } })
            }
            Self::Django => json!({
                "_auth_user_id": user.to_string(),
                "_auth_user_backend": "django.contrib.auth.backends.ModelBackend",
                "_auth_user_hash": hex::encode(bytes(0, 32)),
            }),
            Self::AxumLoginApp | Self::AxumLoginAppText => {
                let mut app = json!({
                    "axum-login.data": { "user_id": user, "auth_hash": bytes(0, 32) },
                    "csrf_token": hex::encode(bytes(1, 32)),
                    "locale": pick(&["en-US", "de-DE", "fr-FR", "en-GB", "pt-BR"], 1),
                    "flash": pick(&["Welcome back", "Item removed", "Order placed"], 2),
                });
                if self == Self::AxumLoginAppText {
                    app["messages"] = text(n, TEXT_CHARS).into();
                }
                app
            }
            Self::ShopCart => {
                let items: Vec<Value> = (0..2 + draw(1, 4))
                    .map(|i| {
                        json!({
                            "sku": format!("SKU-{:08}", draw(10 + i, 100_000_000)),
                            "qty": 1 + draw(20 + i, 5),
                            "price_cents": 99 + draw(30 + i, 49_900),
                        })
                    })
                    .collect();
                json!({
                    "axum-login.data": { "user_id": user, "auth_hash": bytes(0, 32) },
                    "csrf_token": hex::encode(bytes(1, 32)),
                    "currency": pick(&["EUR", "USD", "GBP"], 3),
                    "cart": { "items": items, "updated_at": 1_795_000_000 + draw(2, 1_000_000) },
                })
            }
            Self::OAuthLogin => {
                let domain = pick(&["gmail.com", "outlook.com", "example.org", "proton.me"], 4);
                json!({
                    "axum-login.data": { "user_id": user, "auth_hash": bytes(0, 32) },
                    "csrf_token": hex::encode(bytes(1, 32)),
                    "oauth": {
                        "provider": pick(&["google", "github", "microsoft"], 5),
                        "subject": format!("{:021}", draw(3, 10u64.pow(19))),
                        "email": format!("{}@{domain}", b64url(1, 6 + draw(4, 8) as usize).to_lowercase()),
                        "access_token": format!("ya29.{}", b64url(2, 140)),
                        "refresh_token": format!("1//{}", b64url(3, 80)),
                        "expires_at": 1_795_000_000 + draw(5, 1_000_000),
                        "scope": "openid email profile",
                    },
                })
            }
            Self::TenantLogin => {
                let seen = draw(6, 86_400_000);
                json!({
                    "axum-login.data": { "user_id": uuid(7), "auth_hash": bytes(0, 32) },
                    "csrf_token": hex::encode(bytes(1, 32)),
                    "tenant_id": uuid(8),
                    "role": pick(&["member", "admin", "viewer"], 6),
                    "ip": format!("{}.{}.{}.{}", draw(7, 256), draw(8, 256), draw(9, 256), draw(10, 256)),
                    "last_seen": format!(
                        "2026-11-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                        1 + draw(11, 30),
                        seen / 3_600_000,
                        seen / 60_000 % 60,
                        seen / 1000 % 60,
                        seen % 1000
                    ),
                })
            }
            Self::OidcLogin => {
                let issued = 1_795_000_000 + draw(12, 1_000_000);
                let client = "407408718192-q3h5bk2cd8t7j1vjoq9k1u2ldsc0dntl.apps.example.com";
                let header = json!({
                    "alg": "RS256",
                    "kid": pick(&["6f7254101f56e41cf35c9926de84a2d552b4c6f1", "a3b762f871cdb3bae0044c649622fc1396eda3e3"], 7),
                    "typ": "JWT",
                });
                let name = |salt: u64| {
                    let mut word = b64url(salt, 4 + draw(salt, 6) as usize).to_lowercase();
                    word.retain(|c| c.is_ascii_alphabetic());
                    let mut chars = word.chars();
                    chars
                        .next()
                        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                        .unwrap_or_default()
                };
                let (first, last) = (name(13), name(14));
                let claims = json!({
                    "iss": "https://accounts.example.com",
                    "azp": client,
                    "aud": client,
                    "sub": format!("{:021}", draw(15, 10u64.pow(19))),
                    "email": format!("{}.{}@{}", first.to_lowercase(), last.to_lowercase(), pick(&["gmail.com", "outlook.com", "example.org"], 8)),
                    "email_verified": true,
                    "nonce": b64url(16, 22),
                    "name": format!("{first} {last}"),
                    "given_name": first,
                    "family_name": last,
                    "iat": issued,
                    "exp": issued + 3600,
                });
                let jwt = format!(
                    "{}.{}.{}",
                    base64url(header.to_string().as_bytes()),
                    base64url(claims.to_string().as_bytes()),
                    base64url(&bytes(17, 256))
                );
                json!({
                    "axum-login.data": { "user_id": user, "auth_hash": bytes(0, 32) },
                    "csrf_token": hex::encode(bytes(1, 32)),
                    "oidc": { "id_token": jwt, "expires_at": issued + 3600 },
                })
            }
        };
        serde_json::from_value(value).unwrap_or_default()
    }
}

/// `bytes` in base64url without padding, as a JSON Web Token writes its
/// parts.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    bytes
        .chunks(3)
        .flat_map(|chunk| {
            let word = chunk
                .iter()
                .enumerate()
                .fold(0u32, |w, (i, b)| w | u32::from(*b) << (16 - 8 * i));
            (0..=chunk.len()).map(move |i| ALPHABET[(word >> (18 - 6 * i) & 63) as usize] as char)
        })
        .collect()
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

/// `len` characters drawn at random from letters, digits and space,
/// different for each `n`: text no dictionary has seen, at about six bits
/// a character.
fn text(n: u64, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 ";
    (0..len as u64)
        .map(|i| {
            let r = splitmix64(n.wrapping_mul(1 << 24) ^ (0x7e57 << 48) ^ i);
            ALPHABET[(r % ALPHABET.len() as u64) as usize] as char
        })
        .collect()
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
        let sizes: Vec<usize> = Profile::ALL[..6]
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
    fn carts_and_oauth_logins_vary_around_their_sizes() {
        for (profile, low, high) in [
            (Profile::ShopCart, 230.0, 270.0),
            (Profile::OAuthLogin, 460.0, 500.0),
            (Profile::TenantLogin, 225.0, 260.0),
            (Profile::OidcLogin, 1050.0, 1200.0),
        ] {
            let sizes: Vec<usize> = (0..1000)
                .map(|n| json_map::encode(&profile.data(n)).unwrap().len())
                .collect();
            let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
            assert!((low..high).contains(&mean), "{profile}: mean {mean}");
            assert_ne!(profile.data(1), profile.data(2));
        }
    }

    /// Whether `a` and `b` share a run of 8 bytes: a copy a compressor
    /// would find and the peer's store would not.
    fn share_a_run(a: &[u8], b: &[u8]) -> bool {
        a.windows(8).any(|w| b.windows(8).any(|v| v == w))
    }

    fn bin(value: &Value) -> Vec<u8> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect()
    }

    #[test]
    fn random_parts_of_a_session_share_no_bytes() {
        for n in [1, 12_345] {
            for profile in [
                Profile::AxumLoginApp,
                Profile::ShopCart,
                Profile::OAuthLogin,
            ] {
                let data = profile.data(n);
                let digest = bin(&data["axum-login.data"]["auth_hash"]);
                let csrf = hex::decode(data["csrf_token"].as_str().unwrap()).unwrap();
                assert!(!share_a_run(&digest, &csrf), "{profile} {n}");
            }
            let data = Profile::AxumLoginPasswordHash.data(n);
            let phc = bin(&data["axum-login.data"]["auth_hash"]);
            let parts: Vec<&[u8]> = phc.split(|&b| b == b'$').collect();
            let (salt, hash) = (parts[parts.len() - 2], parts[parts.len() - 1]);
            assert_eq!((salt.len(), hash.len()), (22, 43));
            assert!(!share_a_run(salt, hash), "password hash {n}");
        }
    }

    #[test]
    fn tenant_logins_carry_two_random_version_4_uuids() {
        let data = Profile::TenantLogin.data(12_345);
        let ids = [
            data["axum-login.data"]["user_id"].as_str().unwrap(),
            data["tenant_id"].as_str().unwrap(),
        ];
        for id in ids {
            let parts: Vec<&str> = id.split('-').collect();
            let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
            assert_eq!(lens, [8, 4, 4, 4, 12], "{id}");
            assert!(parts[2].starts_with('4') && "89ab".contains(&parts[3][..1]));
            assert!(id.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()));
            assert_eq!(id, id.to_lowercase());
        }
        assert!(!share_a_run(ids[0].as_bytes(), ids[1].as_bytes()));
        let other = Profile::TenantLogin.data(12_346);
        assert_ne!(other["tenant_id"], data["tenant_id"]);
    }

    #[test]
    fn text_is_drawn_from_a_wide_alphabet() {
        let text = text(7, 10_000);
        let distinct: std::collections::HashSet<char> = text.chars().collect();
        assert_eq!(distinct.len(), 63, "letters, digits and space");
        assert_ne!(super::text(1, 50), super::text(2, 50));
    }

    #[test]
    fn names_parse_back() {
        for p in Profile::ALL {
            assert_eq!(p.name().parse::<Profile>().unwrap(), p);
        }
    }

    /// The bytes of base64url `text`.
    fn from_base64url(text: &str) -> Vec<u8> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let bits: Vec<u8> = text
            .bytes()
            .map(|c| ALPHABET.iter().position(|a| *a == c).unwrap() as u8)
            .flat_map(|v| (0..6).rev().map(move |i| v >> i & 1))
            .collect();
        bits.chunks_exact(8)
            .map(|b| b.iter().fold(0, |byte, bit| byte << 1 | bit))
            .collect()
    }

    #[test]
    fn oidc_logins_carry_a_json_web_token_of_random_claims() {
        let token = |n: u64| {
            let data = Profile::OidcLogin.data(n);
            data["oidc"]["id_token"].as_str().unwrap().to_owned()
        };
        let (one, two) = (token(1), token(2));
        let parts: Vec<&str> = one.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: Value = serde_json::from_slice(&from_base64url(parts[0])).unwrap();
        assert_eq!(header["alg"], "RS256");
        let claims: Value = serde_json::from_slice(&from_base64url(parts[1])).unwrap();
        assert_eq!(
            claims["exp"].as_u64(),
            claims["iat"].as_u64().map(|t| t + 3600)
        );
        assert_eq!(from_base64url(parts[2]).len(), 256);
        // Two sessions' subjects, nonces and signatures differ and share
        // no run of bytes.
        let other: Vec<&str> = two.split('.').collect();
        let claims_two: Value = serde_json::from_slice(&from_base64url(other[1])).unwrap();
        for key in ["sub", "nonce", "email"] {
            assert_ne!(claims[key], claims_two[key], "{key}");
        }
        assert!(!share_a_run(
            &from_base64url(parts[2]),
            &from_base64url(other[2])
        ));
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
