package webhook

// KeyForTest exposes decodeSecret to the external tests.
func KeyForTest(secret string) ([]byte, bool) {
	key, err := decodeSecret(secret)
	return key, err == nil
}

// SignForTest exposes sign to the external tests.
var SignForTest = sign
