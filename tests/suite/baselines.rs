//! Kept baselines: stored under their key on either database, replaced, forgotten.

use crate::support::TestDb;
use planwright::store::baselines;

#[tokio::test]
async fn a_kept_baseline_is_found_under_its_key_replaced_and_forgotten() {
    let t = TestDb::new().await;
    assert_eq!(baselines::take(&t.db, "k1").await.unwrap(), None);
    baselines::keep(&t.db, "k1", r#"{"runs":[]}"#)
        .await
        .unwrap();
    baselines::keep(&t.db, "k2", r#"{"runs":[1]}"#)
        .await
        .unwrap();
    assert_eq!(
        baselines::take(&t.db, "k1").await.unwrap().as_deref(),
        Some(r#"{"runs":[]}"#)
    );
    // The same key again: the newer runs stand.
    baselines::keep(&t.db, "k1", r#"{"runs":[2]}"#)
        .await
        .unwrap();
    assert_eq!(
        baselines::take(&t.db, "k1").await.unwrap().as_deref(),
        Some(r#"{"runs":[2]}"#)
    );
    baselines::forget(&t.db, "k1").await.unwrap();
    assert_eq!(baselines::take(&t.db, "k1").await.unwrap(), None);
    assert!(baselines::take(&t.db, "k2").await.unwrap().is_some());
}
