//! `KillSwitches::process` reads the real environment. Checked in child processes of this test
//! binary started with the variables set or removed, so no test changes its own environment.

use gemv_core::{EXACT_ONLY, KillSwitches, NO_BATCH8_RT, NO_EXACT_M_TIERS};
use std::process::Command;

const CHILD: &str = "GEMV_TEST_KILL_SWITCH_CHILD";
const TEST: &str = "process_switches_come_from_the_environment";

#[test]
fn process_switches_come_from_the_environment() {
    if std::env::var_os(CHILD).is_some() {
        let switches = KillSwitches::process();
        println!(
            "switches: exact_m_tiers={} rt2={} fast={}",
            switches.exact_m_tiers, switches.batch8_register_tiled, switches.fast_family
        );
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    // Presence-checked: "0" turns a feature off like any other value.
    for (set, expected) in [
        (None, "switches: exact_m_tiers=true rt2=true fast=true"),
        (Some(NO_EXACT_M_TIERS), "switches: exact_m_tiers=false rt2=true fast=true"),
        (Some(NO_BATCH8_RT), "switches: exact_m_tiers=true rt2=false fast=true"),
        (Some(EXACT_ONLY), "switches: exact_m_tiers=true rt2=true fast=false"),
    ] {
        let mut child = Command::new(&exe);
        child.args(["--exact", TEST, "--nocapture", "--test-threads=1"]).env(CHILD, "1");
        child.env_remove(NO_EXACT_M_TIERS).env_remove(NO_BATCH8_RT).env_remove(EXACT_ONLY);
        if let Some(name) = set {
            child.env(name, "0");
        }
        let output = child.output().expect("the child runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{set:?}: {stdout}");
        assert!(stdout.contains(expected), "{set:?}: expected {expected:?} in\n{stdout}");
    }
}
