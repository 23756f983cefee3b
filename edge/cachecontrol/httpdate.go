package cachecontrol

import (
	"errors"
	"net/http"
	"strings"
	"time"
)

// errBadDate is returned for a value that is not an HTTP-date.
var errBadDate = errors.New("not an HTTP-date (RFC 9110 5.6.7)")

// ParseHTTPDate parses an HTTP-date strictly (RFC 9110 5.6.7): the IMF-fixdate
// "Sun, 06 Nov 1994 08:49:37 GMT", or one of the obsolete forms RFC 850
// "Sunday, 06-Nov-94 08:49:37 GMT" and asctime "Sun Nov  6 08:49:37 1994". Every field has its
// exact width and separators are single spaces; day, month and zone names are matched without
// regard to case (the RFC makes them case-sensitive, but a wrongly cased name is not ambiguous,
// and an optimal cache reuses such a response). net/http's ParseTime
// goes through time.Parse, which also accepts a one-digit hour or day and so reads dates the RFC
// calls invalid as valid; for Expires that turns "already expired" (RFC 9111 5.3) into fresh.
func ParseHTTPDate(s string) (time.Time, error) {
	switch {
	case len(s) == 29 && s[3] == ',':
		return parseIMF(s)
	case len(s) == 24 && s[3] == ' ':
		return parseASC(s)
	default:
		if i := strings.IndexByte(s, ','); i > 0 {
			return parseRFC850(s, i)
		}
	}
	return time.Time{}, errBadDate
}

var (
	dayNames     = []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	longDayNames = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	monthNames   = []string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// parseIMF reads "Sun, 06 Nov 1994 08:49:37 GMT".
func parseIMF(s string) (time.Time, error) {
	if !oneOf(s[:3], dayNames) || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' || !strings.EqualFold(s[25:], " GMT") {
		return time.Time{}, errBadDate
	}
	day, ok1 := digits(s[5:7])
	mon := month(s[8:11])
	year, ok2 := digits(s[12:16])
	if !ok1 || !ok2 {
		return time.Time{}, errBadDate
	}
	return build(year, mon, day, s[17:25])
}

// parseRFC850 reads "Sunday, 06-Nov-94 08:49:37 GMT"; comma is the index of the comma.
func parseRFC850(s string, comma int) (time.Time, error) {
	rest := s[comma+1:]
	if !oneOf(s[:comma], longDayNames) || len(rest) != 23 || rest[0] != ' ' || rest[3] != '-' ||
		rest[7] != '-' || rest[10] != ' ' || !strings.EqualFold(rest[19:], " GMT") {
		return time.Time{}, errBadDate
	}
	day, ok1 := digits(rest[1:3])
	mon := month(rest[4:7])
	yy, ok2 := digits(rest[8:10])
	if !ok1 || !ok2 {
		return time.Time{}, errBadDate
	}
	// RFC 9110 5.6.7: a two-digit year more than 50 years in the future is in the past century.
	year := time.Now().UTC().Year()/100*100 + yy
	if year > time.Now().UTC().Year()+50 {
		year -= 100
	}
	return build(year, mon, day, rest[11:19])
}

// parseASC reads "Sun Nov  6 08:49:37 1994" (the day is two digits or a space and one digit).
func parseASC(s string) (time.Time, error) {
	if !oneOf(s[:3], dayNames) || s[7] != ' ' || s[10] != ' ' || s[19] != ' ' {
		return time.Time{}, errBadDate
	}
	mon := month(s[4:7])
	dd := s[8:10]
	if dd[0] == ' ' {
		dd = "0" + dd[1:]
	}
	day, ok1 := digits(dd)
	year, ok2 := digits(s[20:24])
	if !ok1 || !ok2 {
		return time.Time{}, errBadDate
	}
	return build(year, mon, day, s[11:19])
}

// build checks the clock "HH:MM:SS" and the calendar date and returns the UTC time.
func build(year int, mon time.Month, day int, clock string) (time.Time, error) {
	if mon == 0 || clock[2] != ':' || clock[5] != ':' {
		return time.Time{}, errBadDate
	}
	hh, ok1 := digits(clock[0:2])
	mm, ok2 := digits(clock[3:5])
	ss, ok3 := digits(clock[6:8])
	if !ok1 || !ok2 || !ok3 || hh > 23 || mm > 59 || ss > 60 || day < 1 {
		return time.Time{}, errBadDate
	}
	t := time.Date(year, mon, day, hh, mm, ss, 0, time.UTC)
	if t.Day() != day && ss != 60 { // 31 Feb and the like roll over into the next month
		return time.Time{}, errBadDate
	}
	return t, nil
}

// digits parses a fixed-width run of ASCII digits.
func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, len(s) > 0
}

func month(s string) time.Month {
	for i, m := range monthNames {
		if strings.EqualFold(s, m) {
			return time.Month(i + 1)
		}
	}
	return 0
}

func oneOf(s string, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(s, n) {
			return true
		}
	}
	return false
}

// headerDate parses the single HTTP-date in field name of h. ok is false when the field is
// missing, repeated, or not a valid HTTP-date.
func headerDate(h http.Header, name string) (time.Time, bool) {
	vv := h[name]
	if len(vv) != 1 {
		return time.Time{}, false
	}
	t, err := ParseHTTPDate(strings.TrimSpace(vv[0]))
	return t, err == nil
}

// maxDelta is what a delta-seconds value too large to represent is taken as (RFC 9111 1.2.2).
const maxDelta = 1 << 31

// AgeValue reads the Age field (RFC 9111 5.1): the first member of a list-based value is used and
// the rest discarded; a value of 2^31 or more is 2147483648 (RFC 9111 1.2.2), not an error.
// ok is false when the field is absent or its first member is not a non-negative integer.
func AgeValue(h http.Header) (time.Duration, bool) {
	vv := h["Age"]
	if len(vv) == 0 {
		return 0, false
	}
	first, _, _ := strings.Cut(vv[0], ",")
	first = strings.TrimSpace(first)
	if first == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(first); i++ {
		c := first[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < maxDelta {
			n = n*10 + int64(c-'0')
		}
	}
	return time.Duration(min(n, maxDelta)) * time.Second, true
}
