local SERVER_EXPIRY = true
