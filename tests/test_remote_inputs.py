"""Inputs at URLs (docs/storage.md): .nvdb files read by byte ranges from moto's S3 server and from
memory://, against the same files read locally (bit for bit), with the bytes read counted; .vdb files
read whole; errors that name the URL; ``vdbflow info``, ``convert``, points files and a job reading
``s3://``."""

import glob
import json
import os
import re

import numpy as np
import pytest
import xarray as xr
import yaml
from click.testing import CliRunner

import vdbflow
from vdbflow.io.location import Url, coalesce
from vdbflow.jobs.cli.main import main

WARP_ASSETS = sorted(
    glob.glob(os.path.join(os.path.dirname(pytest.importorskip("warp").__file__), "**/*.nvdb"), recursive=True)
)
OPENVDB = os.path.join(os.path.dirname(__file__), "data", "openvdb")
LEAF = 8 * 8 * 8


def packed_volume(rng, leaves_per_edge=12, components=3):
    """A vec3 volume of leaves packed in one upper node (as simulation data is): leaves dominate the file."""
    grid = np.stack(np.meshgrid(*[np.arange(leaves_per_edge)] * 3, indexing="ij"), -1).reshape(-1, 3) * 8
    keep = grid[rng.random(len(grid)) < 0.8]
    local = np.stack(np.meshgrid(*[np.arange(8)] * 3, indexing="ij"), -1).reshape(-1, 3)
    ijk = np.concatenate([o + local[rng.random(LEAF) < 0.7] for o in keep]).astype(np.int32)
    values = rng.standard_normal((len(ijk), components)).astype(np.float32)
    transform = vdbflow.Transform(np.diag([0.25, 0.25, 0.25, 1.0]) + np.eye(4, k=3) * 0.0)
    return vdbflow.Volume.from_voxels(ijk, values, transform=transform, name="velocity")


@pytest.fixture(scope="module")
def packed_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("remote") / "packed.nvdb"
    vdbflow.save(path, {"velocity": packed_volume(np.random.default_rng(39))})
    return path


def to_s3(s3, bucket, path, name=None):
    url = f"s3://{bucket}/{name or os.path.basename(path)}"
    s3.put(url, open(path, "rb").read())
    return url


def assert_same_samples(local, remote, rng, modes=("closest", "linear", "lag4", "bspline3")):
    """Values and Jacobians of both volumes, bit for bit, at points around and outside the data."""
    ijk = local.active_voxels()
    centre = ijk[rng.integers(0, len(ijk), 300)] + rng.uniform(-1.5, 1.5, (300, 3))
    pts = np.concatenate([centre, centre + 1000.25])
    for mode in modes:
        if np.dtype(local.dtype).kind != "f" and mode != "closest":
            continue
        a = vdbflow.sample(local, pts, mode, space="index")
        b = vdbflow.sample(remote, pts, mode, space="index")
        assert a.identical(b), mode
        if np.dtype(local.dtype).kind == "f" and mode != "closest":
            a, b = vdbflow.sample_grad(local, pts, mode, space="index"), vdbflow.sample_grad(remote, pts, mode, "index")
            assert a.identical(b), mode


def same_volume(a, b):
    assert np.array_equal(a.topology.leaf_origins, b.topology.leaf_origins)
    assert np.array_equal(a.topology.masks, b.topology.masks)
    assert np.array_equal(a.topology.tile_origins, b.topology.tile_origins)
    assert np.array_equal(np.asarray(a.active_values()), np.asarray(b.active_values()))
    assert np.array_equal(np.asarray(a.index_to_world), np.asarray(b.index_to_world))


@pytest.mark.parametrize("asset", [os.path.basename(p) for p in WARP_ASSETS if "index" not in p])
def test_warp_assets_from_s3_sample_like_the_local_files(s3, rng, asset):
    """Warp's .nvdb files (zip-compressed: read whole) from S3: the same volume, the same samples."""
    path = next(p for p in WARP_ASSETS if os.path.basename(p) == asset)
    url = to_s3(s3, s3.bucket(), path)
    local, remote = vdbflow.open(path), vdbflow.open(url, storage_options=s3.storage_options)
    same_volume(local, remote)
    assert remote.read_stats.bytes_read == os.path.getsize(path)  # a compressed file is read whole
    assert_same_samples(local, remote, rng)


def test_uncompressed_nvdb_from_s3_whole_and_in_parts(s3, rng, packed_file):
    """A whole grid in two requests (the first 64 KiB, then the rest); bbox= and leaves= parts equal the
    local file's parts, bit for bit."""
    url = to_s3(s3, s3.bucket(), packed_file)
    local = vdbflow.open(packed_file)
    whole = vdbflow.open(url, storage_options=s3.storage_options)
    same_volume(local, whole)
    assert (whole.read_stats.bytes_read, whole.read_stats.requests) == (os.path.getsize(packed_file), 2)
    assert_same_samples(local, whole, rng)
    box = ((8, 16, 0), (40, 47, 30))
    part_local = vdbflow.open(packed_file, bbox=box)
    part = vdbflow.open(url, storage_options=s3.storage_options, bbox=box)
    same_volume(part_local, part)
    assert 0 < part.leaf_count < local.leaf_count
    assert_same_samples(part_local, part, rng, modes=("linear", "lag4"))
    leaves = np.sort(rng.choice(local.leaf_count, 25, replace=False))
    some_local = vdbflow.open(packed_file, leaves=leaves)
    some = vdbflow.open(url, storage_options=s3.storage_options, leaves=leaves)
    same_volume(some_local, some)


@pytest.mark.parametrize("where", ["s3", "memory"])
def test_a_leaf_subset_reads_its_leaves_and_the_tree_only(s3, memory_fs, packed_file, where):
    """Bytes read for a subset: at least its values, at most the tree (upper and lower nodes, headers)
    plus its leaves plus the merge gaps, far below the file's size; few requests."""
    import fsspec

    data = open(packed_file, "rb").read()
    if where == "s3":
        url, options = to_s3(s3, s3.bucket(), packed_file), s3.storage_options
    else:
        url, options = f"{memory_fs}/packed.nvdb", None
        fsspec.filesystem("memory").pipe(url.removeprefix("memory://"), data)
    (info,) = vdbflow.list_grids(packed_file)
    whole = vdbflow.open(packed_file)
    leaf_bytes = (os.path.getsize(packed_file) - 0) / whole.leaf_count  # upper bound per leaf, nodes included
    for leaves in (np.arange(3), np.arange(0, whole.leaf_count, 40), np.arange(100, 160)):
        vol = vdbflow.open(url, storage_options=options, leaves=leaves)
        stats = vol.read_stats
        values = len(leaves) * LEAF * 3 * 4  # the asked leaves' values (float32 vec3)
        assert stats.file_size == len(data)
        assert stats.bytes_read >= values
        tree = info.grid_size - whole.leaf_count * (LEAF * 3 * 4 + 96)  # headers, root, upper and lower nodes
        merged = coalesce([(int(i) * leaf_bytes, (int(i) + 1) * leaf_bytes) for i in leaves])
        slack = 2 * (1 << 16) * len(merged)  # a merge may read the gap between two ranges
        assert stats.bytes_read <= tree + 64 * 1024 + len(leaves) * leaf_bytes + slack
        assert stats.bytes_read < 0.5 * len(data), str(stats)
        assert stats.requests <= len(merged) + 8, str(stats)  # the leaves' merged ranges, the tree's few
        assert stats.rounds <= 8, str(stats)  # issued together, level by level
        same_volume(vdbflow.open(packed_file, leaves=leaves), vol)


def test_vdb_grids_from_s3_read_by_grid_with_the_local_values(s3):
    """Each grid of OpenVDB files (several grids, an instance, half floats, a mask, zip) from S3: the
    listing and every grid equal the local file's; no byte is read twice."""
    bucket = s3.bucket()
    for path in sorted(glob.glob(os.path.join(OPENVDB, "*.vdb"))):
        url = to_s3(s3, bucket, path)
        infos, stats = vdbflow.io.volumes.list_grids_read(url, s3.storage_options)
        assert [(g.name, g.leaf_count, g.index_bbox) for g in infos] == [
            (g.name, g.leaf_count, g.index_bbox) for g in vdbflow.list_grids(path)
        ]
        assert stats.bytes_read <= os.path.getsize(path)
        for g in infos:
            local = vdbflow.open(path, g.index)
            remote = vdbflow.open(url, g.index, storage_options=s3.storage_options)
            assert remote.read_stats.bytes_read <= os.path.getsize(path)
            if isinstance(local, vdbflow.Volume):
                same_volume(local, remote)
            else:
                assert np.array_equal(local.masks, remote.masks)


def test_a_large_vdb_is_listed_from_its_topology_alone(memory_fs, tmp_path, rng):
    """Listing a .vdb file at a URL reads its header, descriptor, head and topology, not its leaf buffers;
    a part of it opens with the local file's values."""
    import fsspec
    from vdb_writer import write_vdb

    grid = np.stack(np.meshgrid(*[np.arange(10)] * 3, indexing="ij"), -1).reshape(-1, 3) * 8
    local = np.stack(np.meshgrid(*[np.arange(8)] * 3, indexing="ij"), -1).reshape(-1, 3)
    ijk = np.concatenate([o + local for o in grid])
    path = tmp_path / "big.vdb"
    write_vdb(path, "Tree_float_5_4_3", np.float32, 1, ijk, rng.standard_normal(len(ijk)), 0.0)
    url = f"{memory_fs}/big.vdb"
    fsspec.filesystem("memory").pipe(url.removeprefix("memory://"), path.read_bytes())
    infos, stats = vdbflow.io.volumes.list_grids_read(url)
    assert infos[0].leaf_count == vdbflow.list_grids(path)[0].leaf_count == 1000
    assert stats.bytes_read < 0.1 * path.stat().st_size, str(stats)  # no leaf buffer
    box = ((0, 0, 0), (20, 20, 20))
    same_volume(vdbflow.open(path, bbox=box), vdbflow.open(url, bbox=box))


def test_errors_name_the_url(s3, packed_file, tmp_path):
    bucket = s3.bucket()
    url = to_s3(s3, bucket, packed_file)
    cases = {
        f"s3://{bucket}/missing.nvdb": "no such object",
        "s3://no-such-bucket-39/a.nvdb": "no such object",
        "nosuchprotocol://host/a.nvdb": "protocol",
    }
    for bad, text in cases.items():
        with pytest.raises(vdbflow.StorageError, match=text) as err:
            vdbflow.open(bad, storage_options=s3.storage_options if bad.startswith("s3") else None)
        assert bad in str(err.value)
        with pytest.raises(vdbflow.StorageError):
            vdbflow.list_grids(bad, storage_options=s3.storage_options if bad.startswith("s3") else None)
    with s3.checked_credentials() as good:
        assert vdbflow.open(url, storage_options=good, leaves=[0]).leaf_count == 1  # the credentials are used
        for wrong in (dict(good, secret="not-the-secret"), dict(good, key="AKIANOTAKEY0000000")):
            with pytest.raises(vdbflow.StorageError, match="permission denied.*credentials") as err:
                vdbflow.open(url, storage_options=wrong)
            assert url in str(err.value)
    with pytest.raises(vdbflow.StorageError, match="expected a URL with storage_options"):
        vdbflow.open(packed_file, storage_options={"anon": True})
    s3.put(f"s3://{bucket}/junk.nvdb", b"not a NanoVDB file at all" * 40)
    with pytest.raises(vdbflow.NanoVDBError, match=f"s3://{bucket}/junk.nvdb"):
        vdbflow.open(f"s3://{bucket}/junk.nvdb", storage_options=s3.storage_options, leaves=[0])


def test_a_replaced_object_is_refused(s3, packed_file, monkeypatch):
    """An object rewritten between the first and the last request of a read is refused, not mixed."""
    from vdbflow.io.location import RemoteFile

    url = to_s3(s3, s3.bucket(), packed_file)
    real = RemoteFile.read_ranges

    def rewrite_then_read(self, ranges, gap=1 << 16):
        if self.stats.requests == 1:  # after the first request: someone replaces the object
            s3.put(url, open(packed_file, "rb").read()[:-32] + b"\0" * 32)
        return real(self, ranges, gap)

    monkeypatch.setattr(RemoteFile, "read_ranges", rewrite_then_read)
    with pytest.raises(vdbflow.StorageError, match="stay the same object"):
        vdbflow.open(url, storage_options=s3.storage_options, leaves=[0, 1])


def test_info_lists_a_url_and_the_bytes_read(s3, packed_file):
    url = to_s3(s3, s3.bucket(), packed_file)
    runner = CliRunner(env={"COLUMNS": "250"})
    done = runner.invoke(main, ["info", "--json", "--storage-options", json.dumps(s3.storage_options), url])
    assert done.exit_code == 0, done.output
    (entry,) = json.loads(done.output)
    assert entry["read"]["file_bytes"] == os.path.getsize(packed_file)
    assert 0 < entry["read"]["bytes"] < 0.05 * os.path.getsize(packed_file)
    assert entry["grids"][0]["leaf_count"] == vdbflow.list_grids(packed_file)[0].leaf_count
    table = runner.invoke(main, ["info", "--storage-options", json.dumps(s3.storage_options), url])
    assert table.exit_code == 0 and f"{url}: 1 grid(s), read " in table.output
    missing = runner.invoke(main, ["info", "--storage-options", json.dumps(s3.storage_options), url + ".gone"])
    assert missing.exit_code == 2 and url + ".gone" in missing.output


def test_convert_reads_npy_and_vdb_urls(memory_fs, tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    dense = np.zeros((24, 20, 16), np.float32)
    dense[3:15, 4:9, 2:13] = np.random.default_rng(1).standard_normal((12, 5, 11))
    np.save(tmp_path / "d.npy", dense)
    fs.pipe(f"{memory_fs}/d.npy".removeprefix("memory://"), (tmp_path / "d.npy").read_bytes())
    vdb = os.path.join(OPENVDB, "grids.vdb")
    fs.pipe(f"{memory_fs}/g.vdb".removeprefix("memory://"), open(vdb, "rb").read())
    runner = CliRunner()
    for source, local in ((f"{memory_fs}/d.npy", str(tmp_path / "d.npy")), (f"{memory_fs}/g.vdb", vdb)):
        a, b = tmp_path / "from-url.nvdb", tmp_path / "from-file.nvdb"
        for src, out in ((source, a), (local, b)):
            done = runner.invoke(main, ["convert", src, str(out), "--overwrite"])
            assert done.exit_code == 0, done.output
        assert a.read_bytes() == b.read_bytes()


def test_points_files_at_urls_give_the_local_points(s3, tmp_path):
    """.npy (by ranges, chunk by chunk), .csv, .parquet and .zarr points at s3:// equal the local files'."""
    pd = pytest.importorskip("pandas")
    from vdbflow.jobs.config.model import FilePoints
    from vdbflow.jobs.points import make_points

    bucket = s3.bucket()
    pts = np.random.default_rng(7).uniform(-3, 3, (2_500, 3))
    np.save(tmp_path / "p.npy", pts)
    pd.DataFrame(pts, columns=list("xyz")).to_csv(tmp_path / "p.csv", index=False)
    pd.DataFrame(pts, columns=["px", "py", "pz"]).to_parquet(tmp_path / "p.parquet")
    xr.DataArray(pts, dims=("n", "c")).to_dataset(name="probes").to_zarr(tmp_path / "p.zarr", zarr_format=2)
    fs = s3.filesystem()
    fs.put(str(tmp_path / "p.zarr"), f"{bucket}/p.zarr", recursive=True)
    for name in ("p.npy", "p.csv", "p.parquet"):
        to_s3(s3, bucket, tmp_path / name)
    for name, extra in (
        ("p.npy", {}),
        ("p.csv", {}),
        ("p.parquet", {"columns": ["px", "py", "pz"]}),
        ("p.zarr", {"array": "probes"}),
    ):
        spec = {"kind": "file", "chunk": 700, "storage_options": s3.storage_options, **extra}
        remote = FilePoints.model_validate({**spec, "path": f"s3://{bucket}/{name}"})
        local = FilePoints.model_validate(
            {**{k: v for k, v in spec.items() if k != "storage_options"}, "path": str(tmp_path / name)}
        )
        got = make_points(remote, None).points.compute()
        want = make_points(local, None).points.compute()
        assert np.array_equal(got, want) and np.array_equal(got, pts), name


def write_config(path, cfg):
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


@pytest.mark.slow
def test_a_job_reads_its_volume_from_s3_like_the_local_file(s3, tmp_path, packed_file):
    """volume.path s3:// with storage_options: the result (local) equals the same job on the local file,
    and the stored config keeps the endpoint but not the credentials."""
    url = to_s3(s3, s3.bucket(), packed_file)
    base = {
        "points": {"kind": "random", "count": 6_000, "chunk": 2_000, "seed": 5},
        "sampling": {"mode": "linear", "outputs": ["value", "jacobian"]},
        "cluster": {"kind": "local", "workers": 2, "dashboard": False},
    }
    runner = CliRunner(env={"COLUMNS": "250"})
    results = []
    for name, volume, more in (
        ("remote", {"path": url, "storage_options": s3.storage_options}, {}),
        ("partitioned", {"path": url, "storage_options": s3.storage_options}, {"partitions": 2}),
        ("local", {"path": str(packed_file)}, {}),
    ):
        cfg = {"volume": volume, **base, **more, "output": {"path": str(tmp_path / f"{name}.zarr")}}
        done = runner.invoke(main, ["run", write_config(tmp_path / f"{name}.yaml", cfg)], catch_exceptions=False)
        assert done.exit_code == 0, done.output
        results.append(xr.open_zarr(tmp_path / f"{name}.zarr").load())
    remote, partitioned, local = results
    for var in ("velocity", "velocity_jacobian", "x", "y", "z"):
        np.testing.assert_array_equal(remote[var].values, local[var].values)
        np.testing.assert_array_equal(partitioned[var].values, local[var].values)
    stored = yaml.safe_load(remote.attrs["vdbflow_config"])
    assert stored["volume"]["path"] == url
    assert stored["volume"]["storage_options"]["endpoint_url"] == s3.endpoint_url
    assert stored["volume"]["storage_options"]["secret"] == "<redacted>"
    assert s3.storage_options["secret"] not in json.dumps(dict(remote.attrs))
    assert json.loads(remote.attrs["input_sha256"])["velocity"].startswith("etag:")


def test_config_takes_urls_and_refuses_options_without_one(tmp_path, s3):
    from vdbflow.errors import VdbflowError
    from vdbflow.jobs.config.load import load_config

    cfg = {
        "volume": {"path": "s3://bucket/field.nvdb", "storage_options": {"anon": True}},
        "points": {"kind": "file", "path": "s3://bucket/p.npy", "storage_options": {"key": "k", "secret": "s"}},
        "output": {"path": str(tmp_path / "out.zarr")},
    }
    loaded = load_config(write_config(tmp_path / "ok.yaml", cfg))
    assert isinstance(loaded.volume.path, Url) and loaded.volume.path.storage_options == {"anon": True}
    assert loaded.points.path.storage_options == {"key": "k", "secret": "s"}
    cfg["volume"] = {"path": str(tmp_path / "local.nvdb"), "storage_options": {"anon": True}}
    with pytest.raises(VdbflowError, match="storage_options.*URL"):
        load_config(write_config(tmp_path / "bad.yaml", cfg))


def test_series_paths_glob_an_object_store(s3, packed_file):
    from vdbflow.jobs.config.model import VolumeSpec

    bucket = s3.bucket()
    for k in (2, 0, 1):
        to_s3(s3, bucket, packed_file, f"run/step-{k}.nvdb")
    spec = VolumeSpec.model_validate(
        {"series": {"paths": f"s3://{bucket}/run/step-*.nvdb"}, "storage_options": s3.storage_options}
    )
    files = spec.series.files()
    assert [f.name for f in files] == ["step-0.nvdb", "step-1.nvdb", "step-2.nvdb"]
    assert all(f.storage_options == s3.storage_options and f.is_file() for f in files)
    same_volume(vdbflow.open(files[1], leaves=[0, 5]), vdbflow.open(packed_file, leaves=[0, 5]))
    local = vdbflow.open_series([packed_file] * 3, times=[0.0, 1.0, 2.0])
    remote = vdbflow.open_series(files, times=[0.0, 1.0, 2.0])
    pts = vdbflow.open(packed_file).active_voxels()[::997] * 0.25 + 0.1
    assert remote.sample(pts, 1.5).identical(local.sample(pts, 1.5))


def test_distributed_partitions_each_read_their_own_leaves(s3, packed_file, rng, monkeypatch):
    """vdbflow.distribute of a URL: each partition's task reads its own and its halo leaves by ranges (plus
    the tree), the client the whole grid once; sampling equals the local volume's, bit for bit."""
    import distributed

    from vdbflow.io import volumes
    from vdbflow.io.nanovdb import remote

    reads = []
    real = remote.open_grid_remote

    def counting(remote_file, grid, bbox, leaves, checksum, whole=None):
        vol = real(remote_file, grid, bbox, leaves, checksum, whole)
        reads.append((None if leaves is None else np.asarray(leaves), vol.read_stats.bytes_read))
        return vol

    monkeypatch.setattr(remote, "open_grid_remote", counting)  # as io.nanovdb.entry calls it
    monkeypatch.setattr(volumes, "open_grid_remote", counting)  # and io.volumes
    url = Url(to_s3(s3, s3.bucket(), packed_file), s3.storage_options)
    local = vdbflow.open(packed_file)
    ijk = local.active_voxels()
    pts = ijk[rng.integers(0, len(ijk), 2000)] * 0.25 + rng.uniform(-0.4, 0.4, (2000, 3))
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
        vdbflow.distribute(str(url), client, partitions=2, halo=1, storage_options=s3.storage_options) as dv,
    ):
        got = dv.sample_grad(pts, "linear").compute()
        plan = dv.plan
    want = local.sample_grad(pts, "linear")
    np.testing.assert_array_equal(got["velocity"].values, want["velocity"].values)
    np.testing.assert_array_equal(got["velocity_jacobian"].values, want["velocity_jacobian"].values)
    size = os.path.getsize(packed_file)
    parts = [r for r in reads if r[0] is not None]
    assert [r for r in reads if r[0] is None] == [(None, size)]  # the client: the whole grid, once
    wanted = sorted(np.union1d(o, h).tolist() for o, h in zip(plan.owned, plan.halo, strict=True))
    assert len(parts) == 2 and sorted(p.tolist() for p, _ in parts) == wanted  # own and halo leaves, each once
    assert np.union1d(*[p for p, _ in parts]).tolist() == list(range(local.leaf_count))
    leaf = LEAF * 12 + 128  # a vec3f leaf node: 512 values and a head of at most 128 bytes
    tree = size - local.leaf_count * (LEAF * 12 + 96)  # headers, root, upper and lower nodes (and blind data)
    for own, nbytes in parts:  # its own leaves (their ranges merged across gaps of at most 64 KiB), the tree
        merged = coalesce([(int(i) * leaf, (int(i) + 1) * leaf) for i in own], 1 << 16)
        assert len(own) * LEAF * 12 <= nbytes <= tree + (1 << 16) + sum(b - a for a, b in merged)
        assert nbytes < 0.8 * size


def test_a_volume_store_at_a_url_is_read_whole(memory_fs, tmp_path, packed_file):
    import fsspec

    vol = vdbflow.open(packed_file, leaves=np.arange(40))
    vol.to_zarr(tmp_path / "v.zarr")
    fsspec.filesystem("memory").put(
        str(tmp_path / "v.zarr"), f"{memory_fs}/v.zarr".removeprefix("memory://"), recursive=True
    )
    got = vdbflow.open(f"{memory_fs}/v.zarr")
    want = vdbflow.open(tmp_path / "v.zarr")
    same_volume(got, want)
    with pytest.raises(vdbflow.VolumeError, match="Zarr store"):
        vdbflow.open(f"{memory_fs}/v.zarr", leaves=[0])


@pytest.mark.parametrize(
    "path, text",
    [
        ("memory://vdbflow-nothing/here.nvdb", "volume.path .*expected an .nvdb file, found nothing at memory://"),
        ("nosuchprotocol://x/y.nvdb", "volume.path .*expected a URL whose protocol fsspec knows"),
    ],
)
def test_a_job_with_a_missing_or_unknown_url_exits_2_naming_the_key(tmp_path, path, text):
    points = {"kind": "random", "count": 100}
    cfg = {"volume": {"path": path}, "points": points, "output": {"path": str(tmp_path / "o")}}
    done = CliRunner().invoke(main, ["run", write_config(tmp_path / "job.yaml", cfg)])
    assert done.exit_code == 2, done.output
    assert re.search(text, done.output), done.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("version", ["32.4", "32.6", "32.9"])
def test_grids_of_a_multi_grid_file_by_ranges_pass_their_checksums(memory_fs, tmp_path, version):
    """Each grid of a three-grid file (one empty), in each NanoVDB version's layout and checksum rules:
    part of it by ranges equals the local part, with checksum="strict" (the head half is checked)."""
    import fsspec

    rng = np.random.default_rng(3)
    velocity = packed_volume(rng, leaves_per_edge=5)
    speed = vdbflow.Volume.from_voxels(
        velocity.active_voxels(), np.linalg.norm(velocity.active_values(), axis=1), name="speed"
    )
    empty = vdbflow.Volume.from_voxels(np.zeros((0, 3), np.int32), np.zeros(0, np.float32), name="empty")
    path = tmp_path / "three.nvdb"
    vdbflow.save(path, {"velocity": velocity, "speed": speed, "empty": empty}, version=version)
    url = f"{memory_fs}/three.nvdb"
    fsspec.filesystem("memory").pipe(url.removeprefix("memory://"), path.read_bytes())
    listed = vdbflow.list_grids(url)
    assert [(g.name, g.leaf_count, g.index_bbox) for g in listed] == [
        (g.name, g.leaf_count, g.index_bbox) for g in vdbflow.list_grids(path)
    ]
    for g in listed:
        leaves = np.arange(0, g.leaf_count, 3)
        a = vdbflow.open(path, g.name, leaves=leaves, checksum="strict")
        b = vdbflow.open(url, g.name, leaves=leaves, checksum="strict")
        same_volume(a, b)
        assert b.read_stats.bytes_read < path.stat().st_size


def _outcome(source, **kw):
    """What opening ``source`` gives: the error type, or the values read and the warnings raised."""
    import warnings

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            vol = vdbflow.open(source, **kw)
            values = np.asarray(vol.active_values()).copy()
        return "ok", values, [str(w.message) for w in caught]
    except vdbflow.VdbflowError as err:
        return type(err).__name__, None, []


@pytest.mark.parametrize("head", [1 << 16, 256])
def test_corrupt_files_read_by_ranges_fail_or_read_as_the_local_file(memory_fs, tmp_path, monkeypatch, head):
    """Bytes flipped or cut anywhere in a two-grid file: read by ranges from memory:// gives what the local
    file gives (the same error type, or the same values and the same checksum warnings), for whole grids,
    leaves= and bbox=: the ranges fetched are the bytes the decoder reads.  With a first request of 256
    bytes the headers too are fetched piece by piece."""
    import fsspec

    monkeypatch.setattr("vdbflow.io.sparse.HEAD", head)

    rng = np.random.default_rng(5)
    ijk = np.argwhere(np.ones((20, 20, 20))).astype(np.int32)
    vol = vdbflow.Volume.from_voxels(ijk, rng.standard_normal(len(ijk)).astype(np.float32), name="d")
    vdbflow.save(tmp_path / "f.nvdb", {"d": vol, "e": vol})
    good = (tmp_path / "f.nvdb").read_bytes()
    fs, url, local = fsspec.filesystem("memory"), f"{memory_fs}/f.nvdb", tmp_path / "fz.nvdb"
    kinds = set()
    for _ in range(120):
        data = bytearray(good)
        for _ in range(rng.integers(1, 4)):
            data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        if rng.random() < 0.1:
            data = data[: int(rng.integers(1, len(data)))]
        local.write_bytes(data)
        fs.pipe(url.removeprefix("memory://"), bytes(data))
        for kw in ({"leaves": [0, 2]}, {"grid": "e", "bbox": ((0, 0, 0), (9, 9, 9))}, {}):
            a, b = _outcome(local, **kw), _outcome(url, **kw)
            assert a[0] == b[0], (kw, a[0], b[0])
            assert a[1] is None or np.array_equal(a[1], b[1], equal_nan=True), kw
            assert len(a[2]) == len(b[2]), (kw, a[2], b[2])
            kinds.add(a[0])
    assert {"ok", "NanoVDBError"} <= kinds  # both outcomes were met


@pytest.mark.parametrize("head", [1 << 16, 256])
def test_corrupt_vdb_files_read_by_ranges_fail_or_read_as_the_local_file(memory_fs, tmp_path, monkeypatch, head):
    """The same for OpenVDB files of several grids (an instance, half floats, a mask): listing and each
    grid opened from memory:// give the local file's outcome, bytes flipped or cut anywhere (a first
    request of 256 bytes: the header grown, each descriptor fetched)."""
    import fsspec

    monkeypatch.setattr("vdbflow.io.sparse.HEAD", head)

    rng = np.random.default_rng(11)
    good = open(os.path.join(OPENVDB, "grids.vdb"), "rb").read()
    fs, url, local = fsspec.filesystem("memory"), f"{memory_fs}/g.vdb", tmp_path / "g.vdb"

    def outcome(source, grid):
        try:
            if grid is None:
                return "ok", [(g.name, g.leaf_count, g.index_bbox) for g in vdbflow.list_grids(source)]
            got = vdbflow.open(source, grid)
            return "ok", np.asarray(got.active_values() if isinstance(got, vdbflow.Volume) else got.masks).copy()
        except vdbflow.VdbflowError as err:
            return type(err).__name__, None

    kinds = set()
    for _ in range(60):
        data = bytearray(good)
        for _ in range(rng.integers(1, 4)):
            data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        if rng.random() < 0.1:
            data = data[: int(rng.integers(1, len(data)))]
        local.write_bytes(data)
        fs.pipe(url.removeprefix("memory://"), bytes(data))
        for grid in (None, 0, 3, 4, 6):
            a, b = outcome(local, grid), outcome(url, grid)
            assert a[0] == b[0], (grid, a[0], b[0])
            if a[1] is not None:
                assert (a[1] == b[1]) if grid is None else np.array_equal(a[1], b[1], equal_nan=True), grid
            kinds.add(a[0])
    assert {"ok", "OpenVDBError"} <= kinds
