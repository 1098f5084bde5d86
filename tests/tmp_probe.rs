mod common;
use spacewake::store::*;
#[test]
fn probe() {
    let t = common::store();
    t.store.create_space("s", "o").unwrap();
    let mut s = t.store.open_space("s").unwrap();
    s.plane(|p| {
        for _ in 0..3 { 
        let st = std::time::Instant::now();
        for _ in 0..10_000 { p.schedule(Some("pc-x"))?; }
        eprintln!("schedule(Some) {:?}/call", st.elapsed() / 10_000);
        let st = std::time::Instant::now();
        for _ in 0..10_000 { p.doc("pc-x")?; }
        eprintln!("doc {:?}/call", st.elapsed() / 10_000);
        }
        Ok(())
    }).unwrap();
}
