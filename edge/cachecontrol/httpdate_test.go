package cachecontrol

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestParseHTTPDateStrict(t *testing.T) {
	want := time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)
	for _, s := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",  // IMF-fixdate
		"Sunday, 06-Nov-94 08:49:37 GMT", // RFC 850
		"Sun Nov  6 08:49:37 1994",       // asctime
		"SUN, 06 nov 1994 08:49:37 gmt",  // names in the wrong case are still unambiguous
	} {
		got, err := ParseHTTPDate(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: got %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{
		"Sun, 06 Nov 1994 8:49:37 GMT",    // one-digit hour
		"Sun,  06 Nov 1994 08:49:37 GMT",  // a run of spaces
		"Sun, 06  Nov 1994 08:49:37 GMT",  // a run of spaces
		"Sun, 6 Nov 1994 08:49:37 GMT",    // one-digit day
		"Sun, 06 Nov 1994 08:49:37 UTC",   // not GMT
		"Sun, 06 Nov 94 08:49:37 GMT",     // two-digit year in IMF-fixdate
		"Sun, 31 Feb 1994 08:49:37 GMT",   // no such day
		"Sun, 06 Nov 1994 24:49:37 GMT",   // no such hour
		"Sun, 06 Nov 1994 08:49:37 GMT+1", // trailing text
		"Sun, 06 Nov 1994 08:49:37",       // no zone
		"Sunday, 06-Nov-1994 08:49:37 GMT",
		"Sun Nov 6 08:49:37 1994", // asctime day needs two columns
		"0", "-1", "", "Thu, 01 Jan 1970 00:00:00 GMT, Thu, 01 Jan 1970 00:00:00 GMT",
	} {
		if got, err := ParseHTTPDate(s); err == nil {
			t.Errorf("%q parsed as %v; want an error", s, got)
		}
	}
}

// TestExpiresInvalidMeansExpired runs at every hour of a day: the dates are built from the hour
// it pretends to be, never from Go's 12-hour "3" layout (which prints 00:xx as "12").
func TestExpiresInvalidMeansExpired(t *testing.T) {
	day := time.Now().UTC().Truncate(24 * time.Hour)
	for h := range 24 {
		now := day.Add(time.Duration(h)*time.Hour + 7*time.Minute)
		date := now.Format(http.TimeFormat)
		later := now.Add(time.Hour)
		future := later.Format(http.TimeFormat)
		if life, _ := Lifetime(200, hdr("Date", date, "Expires", future), nil, Heuristic{}); life < 59*time.Minute {
			t.Fatalf("at %02d:07 a valid Expires: lifetime %v", h, life)
		}
		// A one-digit hour in the future, whatever the hour now: 03:04:05 a year on.
		oneDigitHour := time.Date(now.Year()+1, now.Month(), 1, 0, 0, 0, 0, time.UTC).Format("Mon, 02 Jan 2006") + " 3:04:05 GMT"
		for name, hd := range map[string]http.Header{
			"one-digit hour": hdr("Date", date, "Expires", oneDigitHour),
			"run of spaces":  hdr("Date", date, "Expires", later.Format("Mon,  02 Jan 2006 15:04:05 GMT")),
			"two lines":      hdr("Date", date, "Expires", future, "Expires", future),
			"not a date":     hdr("Date", date, "Expires", "0"),
		} {
			if life, _ := Lifetime(200, hd, nil, Heuristic{Fraction: 0.1, Max: time.Hour}); life != 0 {
				t.Errorf("at %02d:07, %s (%q): lifetime %v, want 0 (already expired)", h, name, hd.Get("Expires"), life)
			}
		}
	}
}

func TestAgeValue(t *testing.T) {
	for i, c := range []struct {
		in   []string
		want time.Duration
		ok   bool
	}{
		{[]string{"10"}, 10 * time.Second, true},
		{[]string{"7200, 0"}, 7200 * time.Second, true},
		{[]string{"7200", "0"}, 7200 * time.Second, true},
		{[]string{"2147483647"}, 2147483647 * time.Second, true},
		{[]string{"2147483648"}, 2147483648 * time.Second, true},
		{[]string{"2147483649"}, 2147483648 * time.Second, true},
		{[]string{"99999999999999999999999"}, 2147483648 * time.Second, true},
		{[]string{"-1"}, 0, false},
		{[]string{"1.5"}, 0, false},
		{[]string{""}, 0, false},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			h := http.Header{"Age": c.in}
			got, ok := AgeValue(h)
			if got != c.want || ok != c.ok {
				t.Errorf("Age %q: %v %v, want %v %v", c.in, got, ok, c.want, c.ok)
			}
		})
	}
}

func TestEffectiveTargeted(t *testing.T) {
	names := []string{"Switchyard-Cache-Control", "Cdn-Cache-Control"}
	h := hdr("Cache-Control", "no-store", "Expires", "Thu, 01 Jan 2099 00:00:00 GMT", "Cdn-Cache-Control", "max-age=60")
	eff := Effective(h, names)
	if eff.Get("Cache-Control") != "max-age=60" || eff.Get("Expires") != "" || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("effective %v (original %v)", eff, h)
	}
	plain := hdr("Cache-Control", "max-age=5")
	if got := Effective(plain, names); got.Get("Cache-Control") != "max-age=5" {
		t.Fatalf("no targeted field: %v", got)
	}
}

func TestValidTargeted(t *testing.T) {
	for v, want := range map[string]bool{
		"max-age=60":                         true,
		"no-store":                           true,
		"private, no-cache":                  true,
		"max-age=60, stale-if-error=30;x=1":  true,
		`foo="bar", baz=?1, n=1.5, b=:aGk=:`: true,
		"":                                   false,
		"max-age=10000, &&&&&":               false,
		`max-age="10000"`:                    false,
		"max-age=1.5":                        false,
		"Max-Age=60":                         false,
		"max-age=60,":                        false,
		"max-age=60 no-store":                false,
	} {
		if got := validTargeted(v); got != want {
			t.Errorf("%q: valid %v, want %v", v, got, want)
		}
	}
}
