//! What the memory benchmark loads beside the sessions to measure a
//! per-user index: sessionpack's packed index, or a Spring-Session-style
//! SET per user; and which user each session belongs to.

use serde::{Deserialize, Serialize};

use sessionpack::error::Result;
use sessionpack::identity::{Form, Identity};
use sessionpack::session::id::SessionId;
use sessionpack::users::UserIndex;

/// The key Spring Session's indexed repository keeps a principal's
/// session ids under (its default namespace), as a SET with no expiry.
pub const SPRING_INDEX_PREFIX: &str = "spring:session:index:org.springframework.session.FindByIndexNameSessionRepository.PRINCIPAL_NAME_INDEX_NAME:";

/// A per-user index to load beside the sessions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UserIndexSpec {
    /// None.
    #[default]
    None,
    /// sessionpack's packed index (compact layout only) of `2^bits`
    /// buckets; `None`: as many as the compact layout's buckets.
    Packed {
        /// `log2` of the index's buckets.
        bits: Option<u8>,
    },
    /// One SET per user of its sessions' ids (hex), with no expiry, as
    /// Spring Session's principal index keeps them.
    SetPerUser,
}

impl std::str::FromStr for UserIndexSpec {
    type Err = String;

    /// `none`, `packed`, `packed:BITS` or `set`.
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "none" => Ok(Self::None),
            "packed" => Ok(Self::Packed { bits: None }),
            "set" => Ok(Self::SetPerUser),
            _ => text
                .strip_prefix("packed:")
                .and_then(|b| b.parse::<u8>().ok())
                .filter(|b| (1..=sessionpack::users::MAX_USER_BITS).contains(b))
                .map(|bits| Self::Packed { bits: Some(bits) })
                .ok_or_else(|| format!("{text:?}: none, packed, packed:BITS (1-24) or set")),
        }
    }
}

impl UserIndexSpec {
    /// A label suffix: ` + packed user index 2^13`, ` + SET per user`.
    pub fn label(self) -> String {
        match self {
            Self::None => String::new(),
            Self::Packed { bits: Some(b) } => format!(" + packed user index 2^{b}"),
            Self::Packed { bits: None } => " + packed user index".to_owned(),
            Self::SetPerUser => " + SET per user".to_owned(),
        }
    }
}

/// Hands out the sessions' identities, `per_user` consecutive sessions to
/// each user; with `confine`, only users whose index entries go to the
/// first `n` buckets of `index` (emulating a larger population).
pub(crate) struct Users {
    form: Form,
    per_user: u64,
    confine: Option<(UserIndex, u32)>,
    next: u64,
    current: Option<Identity>,
    given: u64,
}

impl Users {
    pub(crate) fn new(form: Form, per_user: u32, confine: Option<(UserIndex, u32)>) -> Self {
        Self {
            form,
            per_user: u64::from(per_user.max(1)),
            confine,
            next: 0,
            current: None,
            given: 0,
        }
    }

    /// The next session's identity.
    pub(crate) fn next_session(&mut self) -> Identity {
        if self.given.is_multiple_of(self.per_user) || self.current.is_none() {
            self.current = Some(self.next_user());
        }
        self.given += 1;
        self.current.clone().unwrap_or(Identity::Int(0))
    }

    fn next_user(&mut self) -> Identity {
        loop {
            let identity = self.form.identity(self.next);
            self.next += 1;
            let Some((index, used)) = &self.confine else {
                return identity;
            };
            let mut head = Vec::new();
            identity.encode(&mut head);
            if index.place(&head).0 < *used {
                return identity;
            }
        }
    }
}

/// Adds each session's id to its user's Spring-style SET.
pub(crate) async fn add_to_sets<C>(conn: &C, items: &[(SessionId, Identity)]) -> Result<()>
where
    C: redis::aio::ConnectionLike + Clone + Send,
{
    let mut pipe = redis::pipe();
    for (id, identity) in items {
        pipe.sadd(format!("{SPRING_INDEX_PREFIX}{identity}"), id.to_hex())
            .ignore();
    }
    let _: () = pipe.query_async(&mut conn.clone()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!("none".parse(), Ok(UserIndexSpec::None));
        assert_eq!("packed".parse(), Ok(UserIndexSpec::Packed { bits: None }));
        assert_eq!(
            "packed:13".parse(),
            Ok(UserIndexSpec::Packed { bits: Some(13) })
        );
        assert_eq!("set".parse(), Ok(UserIndexSpec::SetPerUser));
        assert!("packed:0".parse::<UserIndexSpec>().is_err());
        assert!("sets".parse::<UserIndexSpec>().is_err());
    }

    #[test]
    fn users_get_consecutive_sessions_and_stay_confined() {
        let mut users = Users::new(Form::Int, 3, None);
        let got: Vec<_> = (0..7).map(|_| users.next_session()).collect();
        assert_eq!(got[0], got[2]);
        assert_ne!(got[2], got[3]);
        assert_eq!(got[3], got[5]);
        let index = UserIndex::new("sp", sessionpack::users::UserIndexConfig::new(10)).unwrap();
        let mut confined = Users::new(Form::Int, 1, Some((index.clone(), 10)));
        for _ in 0..100 {
            let mut head = Vec::new();
            confined.next_session().encode(&mut head);
            assert!(index.place(&head).0 < 10);
        }
    }
}
