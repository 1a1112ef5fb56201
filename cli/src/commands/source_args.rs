//! Which key-per-session store's keys to read, shared by `migrate` (which
//! copies them) and `advise` (which sizes them).

use clap::{Args, ValueEnum};

use sessionpack::takeover::{IdForm, Source, ValueForm};

/// Another store's session keys.
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// The store the sessions come from.
    #[arg(long, value_enum, default_value = "tower-sessions-redis-store")]
    from: From,
    /// For `--from keys`: what every session key begins with.
    #[arg(long, default_value = "")]
    prefix: String,
    /// For `--from keys`: how the id follows the prefix.
    #[arg(long, value_enum, default_value = "hex")]
    id_form: IdFormArg,
    /// For `--from keys`: how the value encodes the data map.
    #[arg(long, value_enum, default_value = "json")]
    value_form: ValueFormArg,
}

/// Stores the tool can read.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum From {
    /// tower-sessions-redis-store 0.16: keys are tower ids, values
    /// MessagePack records.
    TowerSessionsRedisStore,
    /// actix-session 0.11's `RedisSessionStore`: keys are its 64-character
    /// session keys, values JSON objects of JSON texts; copied into a
    /// store the actix store reads those keys from.
    ActixSession,
    /// Keys `<prefix><id>` with values of `--value-form`.
    Keys,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum IdFormArg {
    Hex,
    Base64url,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ValueFormArg {
    Json,
    Msgpack,
}

impl SourceArgs {
    /// The source these arguments name.
    pub fn source(&self) -> Source {
        match self.from {
            From::TowerSessionsRedisStore => Source::tower_sessions_redis_store(),
            From::ActixSession => Source::actix_session(),
            From::Keys => Source::new(
                self.prefix.clone(),
                match self.id_form {
                    IdFormArg::Hex => IdForm::Hex,
                    IdFormArg::Base64url => IdForm::Base64Url,
                },
                match self.value_form {
                    ValueFormArg::Json => ValueForm::JsonMap,
                    ValueFormArg::Msgpack => ValueForm::MsgpackMap,
                },
            ),
        }
    }
}
