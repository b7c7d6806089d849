//! `spec.schedule` and `spec.timeZone`: a cron expression read once, in one place, so the
//! validator and the controller agree on what it means. Pure: times are unix seconds in and out.
//!
//! Five fields (minute hour day-of-month month day-of-week) as CronJob takes them; a sixth,
//! leading seconds field is accepted too (`*/10 * * * * *`), which is what lets a test see
//! several runs without waiting minutes. Time zones are IANA names from the tz database compiled
//! into the binary (chrono-tz), so they work on an image without `/usr/share/zoneinfo`.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

/// Longest schedule text accepted (CronJob's own patterns are far shorter).
pub const MAX_SCHEDULE_CHARS: usize = 256;

/// Why a schedule cannot be used, naming the field that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// `spec.schedule` is not a cron expression this parser takes.
    #[error("{0:?} is not a cron schedule (5 fields: minute hour day-of-month month day-of-week, or 6 with seconds first): {1}")]
    Cron(String, String),
    /// `spec.timeZone` is not an IANA time zone name.
    #[error("{0:?} is not an IANA time zone name (such as Etc/UTC or Europe/Berlin)")]
    TimeZone(String),
}

impl ScheduleError {
    /// The field of `spec` the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            ScheduleError::Cron(..) => "schedule",
            ScheduleError::TimeZone(_) => "timeZone",
        }
    }
}

/// A parsed schedule in its time zone (UTC when none is given).
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    tz: Tz,
}

impl Schedule {
    /// Reads `schedule` in `time_zone`; the error names which of the two is wrong.
    pub fn parse(schedule: &str, time_zone: Option<&str>) -> Result<Self, ScheduleError> {
        let tz = match time_zone {
            None => Tz::UTC,
            Some(name) => Tz::from_str(name).map_err(|_| ScheduleError::TimeZone(name.into()))?,
        };
        if schedule.len() > MAX_SCHEDULE_CHARS {
            return Err(ScheduleError::Cron(
                schedule.chars().take(40).collect(),
                format!("longer than {MAX_SCHEDULE_CHARS} characters"),
            ));
        }
        let fields = schedule.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(ScheduleError::Cron(
                schedule.into(),
                format!("it has {fields} fields"),
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(schedule)
            .map_err(|e| ScheduleError::Cron(schedule.into(), e.to_string()))?;
        Ok(Schedule { cron, tz })
    }

    /// The first slot strictly after `t`, if the schedule has one.
    pub fn next_after(&self, t: i64) -> Option<i64> {
        let at = self.at(t)?;
        let next = self.cron.find_next_occurrence(&at, false).ok()?;
        Some(next.timestamp())
    }

    /// The latest slot at or before `t`, if the schedule has one.
    pub fn latest_until(&self, t: i64) -> Option<i64> {
        let at = self.at(t)?;
        let prev = self.cron.find_previous_occurrence(&at, true).ok()?;
        Some(prev.timestamp())
    }

    fn at(&self, t: i64) -> Option<DateTime<Tz>> {
        let utc = DateTime::<Utc>::from_timestamp(t, 0)?;
        Some(self.tz.from_utc_datetime(&utc.naive_utc()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-01-05T10:07:30Z, a Monday.
    const T: i64 = 1_767_607_650;

    #[test]
    fn five_fields_are_minutes_and_six_begin_with_seconds() {
        let every_5m = Schedule::parse("*/5 * * * *", None).unwrap();
        assert_eq!(every_5m.next_after(T), Some(T - 450 + 600));
        assert_eq!(every_5m.latest_until(T), Some(T - 150));
        let every_10s = Schedule::parse("*/10 * * * * *", None).unwrap();
        assert_eq!(every_10s.next_after(T), Some(T + 10));
        assert_eq!(every_10s.latest_until(T), Some(T));
    }

    #[test]
    fn the_time_zone_moves_the_slots() {
        // 09:00 in Berlin (UTC+1 in January) is 08:00 UTC.
        let berlin = Schedule::parse("0 9 * * *", Some("Europe/Berlin")).unwrap();
        let next = berlin.next_after(T).unwrap();
        assert_eq!((next - 8 * 3600) % 86_400, 0, "{next}");
        let utc = Schedule::parse("0 9 * * *", None).unwrap();
        assert_eq!(utc.next_after(T).unwrap() - next, 3600);
    }

    #[test]
    fn errors_name_the_field_that_is_wrong() {
        let e = Schedule::parse("0 9 * * *", Some("Mars/Olympus")).unwrap_err();
        assert_eq!(e.field(), "timeZone");
        assert!(e.to_string().contains("Mars/Olympus"), "{e}");
        for bad in ["every day", "61 * * * *", "* * * *", "* * * * * * *", ""] {
            let e = Schedule::parse(bad, None).unwrap_err();
            assert_eq!(e.field(), "schedule", "{bad}");
        }
        assert!(Schedule::parse(&"1,".repeat(200), None).is_err());
    }
}

#[cfg(test)]
mod abuse {
    use super::*;

    #[test]
    fn a_schedule_that_never_matches_answers_quickly_with_no_slot() {
        let never = Schedule::parse("0 0 30 2 *", None).unwrap();
        let t0 = std::time::Instant::now();
        assert_eq!(never.next_after(1_767_607_650), None);
        assert_eq!(never.latest_until(1_767_607_650), None);
        assert!(t0.elapsed().as_secs() < 3, "{:?}", t0.elapsed());
    }
}
