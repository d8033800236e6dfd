"""The production guide as checks (`tensor-fusion doctor`, doctor.md): pure parts."""
