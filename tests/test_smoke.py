def test_owner_sees_the_records_list(world, login):
    page = login("owner@acme.test").get("/models/tasks/records")
    assert page.status_code == 200
    assert "Acme private task" in page.get_data(as_text=True)
