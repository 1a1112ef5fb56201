//! A growing store's script reply: the script's own, and the number of
//! fields its bucket holds after it, from which the caller tells when to
//! split the bucket (`compact_grown.lua`, and `compact_add.lua` itself).

/// Each field count below this fits beside an integer reply.
const COUNT_SPAN: i64 = 1 << 20;

/// A reply of a script [`crate::scripts::ByExpiry::growing`] gives.
pub(super) struct Grown<T> {
    /// What the script itself answered.
    pub(super) reply: T,
    /// The fields its bucket holds now (at most `2^20 - 1` where the
    /// reply is an integer: any bucket that full is over every split
    /// threshold).
    pub(super) fields: u64,
}

impl<T: redis::FromRedisValue> redis::FromRedisValue for Grown<T> {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        match v {
            // reply * 2^20 + count
            redis::Value::Int(n) => Ok(Self {
                reply: T::from_redis_value(redis::Value::Int(n.div_euclid(COUNT_SPAN)))?,
                fields: n.rem_euclid(COUNT_SPAN) as u64,
            }),
            other => {
                let (reply, fields) = <(T, u64)>::from_redis_value(other)?;
                Ok(Self { reply, fields })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grown(v: redis::Value) -> Grown<i64> {
        redis::from_redis_value(v).unwrap()
    }

    #[test]
    fn integer_replies_carry_the_count_in_their_low_bits() {
        for (reply, count) in [
            (0, 1),
            (1_795_000_000, 61),
            (4_294_967_295, 1_048_575),
            (-9, 7),
        ] {
            let g = grown(redis::Value::Int(reply * COUNT_SPAN + count));
            assert_eq!((g.reply, g.fields), (reply, count as u64));
        }
    }

    #[test]
    fn other_replies_come_as_a_pair() {
        let g = grown(redis::Value::Array(vec![
            redis::Value::Int(3),
            redis::Value::Int(5_000_000),
        ]));
        assert_eq!((g.reply, g.fields), (3, 5_000_000));
        let none: Grown<Option<Vec<u8>>> = redis::from_redis_value(redis::Value::Array(vec![
            redis::Value::Nil,
            redis::Value::Int(2),
        ]))
        .unwrap();
        assert_eq!((none.reply, none.fields), (None, 2));
    }
}
