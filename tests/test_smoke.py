def test_owner_sees_the_records_list(world, login):
    page = login("owner@acme.test").get("/models/tasks/records")
    assert page.status_code == 200
    assert "Acme private task" in page.get_data(as_text=True)


def test_without_secret_key_a_random_one_is_made_once_and_kept(tmp_path, monkeypatch):
    from monark.config import instance_secret_key, load_config

    monkeypatch.delenv("SECRET_KEY", raising=False)
    assert load_config(str(tmp_path))["SECRET_KEY"] == ""  # no published fallback
    key = instance_secret_key(str(tmp_path))
    assert len(key) == 64 and key == instance_secret_key(str(tmp_path))
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    other = tmp_path / "other"
    other.mkdir()
    assert instance_secret_key(str(other)) != key
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
