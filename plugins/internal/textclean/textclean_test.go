package textclean

import "testing"

func TestWords(t *testing.T) {
	for in, want := range map[string]string{
		"550 5.1.1 unknown user; see http://intranet.example/x?session=ABCDEF123456 /etc/passwd": "550 5.1.1 unknown user; see [redacted] [redacted]",
		"denied:\tC:\\secrets\\smtp.txt\r\nnext line":                                            "denied: [redacted] next line",
		"ftp://host smb:\\\\share 5.7.1 ok":                                                      "[redacted] [redacted] 5.7.1 ok",
		"  nothing   to  hide ":                                                                  "nothing to hide",
		"":                                                                                       "",
	} {
		if got := Words(in, LinkLike); got != want {
			t.Errorf("Words(%q) = %q, want %q", in, got, want)
		}
	}
}
