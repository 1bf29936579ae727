//! Load-time checks of the PEM files behind the catalog connection, so a wrong path or an empty
//! bundle fails at startup with the file's name instead of at the first TLS handshake.
//!
//! The returned messages name the file and the problem. For the private key they never carry
//! parser detail, which could quote part of the key.

use std::path::Path;

/// At least one PEM certificate (`catalog_ca_file`, `catalog_client_cert`).
pub(crate) fn check_certificates(path: &Path) -> Result<(), String> {
    let bytes = read(path)?;
    let mut found = 0usize;
    for cert in rustls_pemfile::certs(&mut bytes.as_slice()) {
        cert.map_err(|e| format!("{} is not a valid PEM file: {e}", path.display()))?;
        found += 1;
    }
    if found == 0 {
        return Err(format!(
            "{} holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(())
}

/// A PEM private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC) (`catalog_client_key`).
pub(crate) fn check_private_key(path: &Path) -> Result<(), String> {
    let bytes = read(path)?;
    match rustls_pemfile::private_key(&mut bytes.as_slice()) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(format!(
            "{} holds no PEM private key (expected PKCS#8, PKCS#1 or SEC1 PEM)",
            path.display()
        )),
        Err(_) => Err(format!(
            "{} is not a valid PEM private key file",
            path.display()
        )),
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    if !path.is_file() {
        return Err(format!(
            "{} does not exist or is not a file",
            path.display()
        ));
    }
    std::fs::read(path).map_err(|e| format!("{} cannot be read: {e}", path.display()))
}
