//! The tower-sessions traits over [`TowerStore`], for each version of
//! tower-sessions-core the features name.

use super::TowerStore;
use crate::error::Error;

macro_rules! session_store {
    ($core:ident) => {
        #[async_trait::async_trait]
        impl<C> $core::SessionStore for TowerStore<C>
        where
            C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
        {
            async fn create(
                &self,
                record: &mut $core::session::Record,
            ) -> $core::session_store::Result<()> {
                let id = self
                    .create_data(
                        record.id.0,
                        &record.data,
                        record.expiry_date.unix_timestamp(),
                        || $core::session::Id::default().0,
                    )
                    .await
                    .map_err(to_store_error::<$core::session_store::Error>)?;
                record.id = $core::session::Id(id);
                Ok(())
            }

            async fn save(
                &self,
                record: &$core::session::Record,
            ) -> $core::session_store::Result<()> {
                self.save_data(
                    record.id.0,
                    &record.data,
                    record.expiry_date.unix_timestamp(),
                )
                .await
                .map_err(to_store_error::<$core::session_store::Error>)?;
                Ok(())
            }

            async fn load(
                &self,
                session_id: &$core::session::Id,
            ) -> $core::session_store::Result<Option<$core::session::Record>> {
                let found = self
                    .load_data(session_id.0)
                    .await
                    .map_err(to_store_error::<$core::session_store::Error>)?;
                found
                    .map(|(data, expires_at)| {
                        Ok($core::session::Record {
                            id: *session_id,
                            data,
                            expiry_date: time::OffsetDateTime::from_unix_timestamp(expires_at)
                                .map_err(|e| $core::session_store::Error::Decode(e.to_string()))?,
                        })
                    })
                    .transpose()
            }

            async fn delete(
                &self,
                session_id: &$core::session::Id,
            ) -> $core::session_store::Result<()> {
                self.delete_data(session_id.0)
                    .await
                    .map_err(to_store_error::<$core::session_store::Error>)
            }
        }

        #[async_trait::async_trait]
        impl<C> $core::ExpiredDeletion for TowerStore<C>
        where
            C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
        {
            async fn delete_expired(&self) -> $core::session_store::Result<()> {
                self.sweep()
                    .await
                    .map(drop)
                    .map_err(to_store_error::<$core::session_store::Error>)
            }
        }

        impl StoreError for $core::session_store::Error {
            fn backend(s: String) -> Self {
                Self::Backend(s)
            }
            fn decode(s: String) -> Self {
                Self::Decode(s)
            }
            fn encode(s: String) -> Self {
                Self::Encode(s)
            }
        }
    };
}

/// The error type of a tower-sessions-core version.
trait StoreError {
    fn backend(s: String) -> Self;
    fn decode(s: String) -> Self;
    fn encode(s: String) -> Self;
}

fn to_store_error<E: StoreError>(e: Error) -> E {
    match e {
        Error::CorruptRecord { .. } => E::decode(e.to_string()),
        Error::EncodeData(_) => E::encode(e.to_string()),
        e => E::backend(e.to_string()),
    }
}

#[cfg(feature = "tower-sessions")]
session_store!(tower_sessions_core);
#[cfg(feature = "tower-sessions-014")]
session_store!(tower_sessions_core_014);
