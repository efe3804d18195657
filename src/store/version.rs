//! A contract version as its `BIGINT` columns hold it: written as the integer, read back
//! into the version, so no row or page converts it by hand.

use crate::contract::ContractVersion;

impl sqlx::Type<sqlx::Any> for ContractVersion {
    fn type_info() -> sqlx::any::AnyTypeInfo {
        <i64 as sqlx::Type<sqlx::Any>>::type_info()
    }
}

impl<'q> sqlx::Encode<'q, sqlx::Any> for ContractVersion {
    fn encode_by_ref(
        &self,
        buf: &mut <sqlx::Any as sqlx::Database>::ArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <i64 as sqlx::Encode<'q, sqlx::Any>>::encode(i64::from(self.0), buf)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Any> for ContractVersion {
    fn decode(
        value: <sqlx::Any as sqlx::Database>::ValueRef<'r>,
    ) -> Result<Self, sqlx::error::BoxDynError> {
        let stored = <i64 as sqlx::Decode<'r, sqlx::Any>>::decode(value)?;
        let version = u32::try_from(stored)
            .map_err(|_| format!("{stored} is not a contract version (1 to {})", u32::MAX))?;
        Ok(ContractVersion(version))
    }
}
