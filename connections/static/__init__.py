"""Package data for the /connect page (HTML, JS, CSS); a package so the files ship in wheels."""
