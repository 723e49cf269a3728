package boxes

import "path"

// TrustPath is where a backend mounts Settings.TrustDir, read-only, in
// every sandbox: the install's egress CA (threadbox-ca.pem) and a bundle of
// the system's roots with it (ca-bundle.pem).
const TrustPath = "/opt/threadbox/trust"

// TrustEnv are the variables a backend that mounts the trust folder sets
// for every command, pointing the common tools at the bundle: OpenSSL
// (curl, git, Python's ssl), curl, git, Python requests, pip and Node.
func TrustEnv() []string {
	bundle := path.Join(TrustPath, "ca-bundle.pem")
	return []string{
		"SSL_CERT_FILE=" + bundle,
		"CURL_CA_BUNDLE=" + bundle,
		"GIT_SSL_CAINFO=" + bundle,
		"REQUESTS_CA_BUNDLE=" + bundle,
		"PIP_CERT=" + bundle,
		"NODE_EXTRA_CA_CERTS=" + path.Join(TrustPath, "threadbox-ca.pem"),
	}
}
