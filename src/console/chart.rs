//! Small SVG charts drawn on the server: no script, no third-party code.
//! A chart is a function of labelled numbers; its text alternative is the
//! table the page shows beside it.

use maud::{html, Markup};

/// One bar: its label and value, and a series (a CSS class) for colour.
pub struct Bar<'a> {
    pub label: String,
    pub value: u64,
    pub series: &'a str,
}

const WIDTH: u32 = 560;
const HEIGHT: u32 = 180;
const AXIS: u32 = 24;

/// A bar chart titled `title` (also its accessible name), values labelled
/// above each bar.
pub fn bars(title: &str, bars: &[Bar<'_>]) -> Markup {
    let max = bars.iter().map(|b| b.value).max().unwrap_or(0).max(1);
    let n = bars.len().max(1) as u32;
    let slot = (WIDTH - 8) / n;
    let width = slot.saturating_sub(6).max(2);
    let plot = HEIGHT - 2 * AXIS;
    html! {
        svg role="img" aria-label=(title) viewBox={"0 0 " (WIDTH) " " (HEIGHT)}
            width="100%" class="chart" xmlns="http://www.w3.org/2000/svg" {
            title { (title) }
            line x1="4" y1=(HEIGHT - AXIS) x2=(WIDTH - 4) y2=(HEIGHT - AXIS) class="axis" {}
            @for (i, b) in bars.iter().enumerate() {
                @let h = ((b.value as f64 / max as f64) * plot as f64).round() as u32;
                @let x = 4 + i as u32 * slot + 3;
                @let y = HEIGHT - AXIS - h;
                rect x=(x) y=(y) width=(width) height=(h) class={"bar " (b.series)} {
                    title { (b.label) ": " (b.value) }
                }
                text x=(x + width / 2) y=(y.saturating_sub(4).max(10)) text-anchor="middle" class="value" { (b.value) }
                text x=(x + width / 2) y=(HEIGHT - 8) text-anchor="middle" class="label" { (b.label) }
            }
        }
    }
}

/// Values over a time window as bars placed by time: each value covers
/// `(previous point, its time]`, so gaps show as gaps. Labelled by the
/// largest value and the window's ends.
pub fn series(
    title: &str,
    points: &[(u64, f64)],
    window: (u64, u64),
    class: &str,
    ends: (&str, &str),
) -> Markup {
    let (from, to) = window;
    let span = to.saturating_sub(from).max(1) as f64;
    let max = points.iter().map(|p| p.1).fold(0.0_f64, f64::max);
    let width = f64::from(WIDTH - 8);
    let plot = f64::from(HEIGHT - 2 * AXIS);
    let x = |t: u64| 4.0 + (t.clamp(from, to) - from) as f64 / span * width;
    html! {
        svg role="img" aria-label=(title) viewBox={"0 0 " (WIDTH) " " (HEIGHT)}
            width="100%" class="chart" xmlns="http://www.w3.org/2000/svg" {
            title { (title) }
            line x1="4" y1=(HEIGHT - AXIS) x2=(WIDTH - 4) y2=(HEIGHT - AXIS) class="axis" {}
            text x="4" y="12" class="value" { "max " (format!("{max:.1}")) " /s" }
            @if max > 0.0 {
                @for (i, (t, v)) in points.iter().enumerate() {
                    @let start = if i == 0 { t.saturating_sub(10_000) } else { points[i - 1].0 };
                    @let h = (v / max * plot).round();
                    @let (x0, x1) = (x(start), x(*t));
                    rect x=(format!("{x0:.1}")) y=(format!("{:.1}", f64::from(HEIGHT - AXIS) - h))
                        width=(format!("{:.1}", (x1 - x0).max(0.5))) height=(format!("{h:.1}")) class={"bar " (class)} {}
                }
            }
            text x="4" y=(HEIGHT - 8) class="label" { (ends.0) }
            text x=(WIDTH - 4) y=(HEIGHT - 8) text-anchor="end" class="label" { (ends.1) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tallest_bar_fills_the_plot_and_every_bar_is_labelled() {
        let svg = bars(
            "lateness",
            &[
                Bar {
                    label: "≤10 ms".into(),
                    value: 40,
                    series: "a",
                },
                Bar {
                    label: "≤100 ms".into(),
                    value: 10,
                    series: "a",
                },
                Bar {
                    label: "more".into(),
                    value: 0,
                    series: "a",
                },
            ],
        )
        .into_string();
        assert!(svg.contains(r#"aria-label="lateness""#));
        assert!(
            svg.contains(&format!(r#"height="{}""#, HEIGHT - 2 * AXIS)),
            "{svg}"
        );
        assert!(
            svg.contains(r#"height="33""#),
            "a quarter of the tallest: {svg}"
        );
        assert!(svg.contains("≤100 ms: 10"));
        assert_eq!(svg.matches("<rect").count(), 3);
    }

    #[test]
    fn a_series_scales_to_its_maximum() {
        let points = [(10_000, 1.0), (20_000, 4.0), (30_000, 0.0)];
        let svg = series("waves", &points, (0, 40_000), "w", ("-1 h", "now")).into_string();
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains(r#"height="132.0""#), "{svg}");
        assert!(svg.contains("max 4.0 /s"));
        // Placed by time: the second bar covers (10 s, 20 s] of 40 s.
        assert!(
            svg.contains(r#"x="142.0""#) && svg.contains(r#"width="138.0""#),
            "{svg}"
        );
        let none = series("none", &[], (0, 1), "w", ("", "")).into_string();
        assert!(!none.contains("<rect"));
    }

    #[test]
    fn no_data_draws_an_empty_axis() {
        let svg = bars("nothing", &[]).into_string();
        assert!(svg.contains("<line"));
        assert!(!svg.contains("<rect"));
    }
}
