package boxes

import "path"

// TrustPath is where a backend mounts Settings.TrustDir, read-only, in
// every sandbox: the install's egress CA (threadbox-ca.pem) and a bundle of
// the system's roots with it (ca-bundle.pem).
const TrustPath = "/opt/threadbox/trust"

// TrustBundle is the bundle of the system's roots and the install's CA
// inside the sandbox.
const TrustBundle = TrustPath + "/ca-bundle.pem"

// TrustCurlrc is the .curlrc of the trust folder: curl reads it through
// CURL_HOME, and an option on curl's command line still wins over it.
const TrustCurlrc = "cacert = \"" + TrustBundle + "\"\n"

// TrustEnv are the variables a backend that mounts the trust folder sets
// for every command, pointing the common tools at the bundle: OpenSSL's
// default (Python's ssl and urllib, pip's system store), pip, git, curl
// (through the folder's .curlrc) and Node (which adds the CA to its own).
// Each is a default a command's own option or variable overrides.
// REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE are not set: Python requests lets
// them override a session's own bundle, which would break pip --cert.
func TrustEnv() []string {
	return []string{
		"SSL_CERT_FILE=" + TrustBundle,
		"PIP_CERT=" + TrustBundle,
		"GIT_SSL_CAINFO=" + TrustBundle,
		"CURL_HOME=" + TrustPath,
		"NODE_EXTRA_CA_CERTS=" + path.Join(TrustPath, "threadbox-ca.pem"),
	}
}
