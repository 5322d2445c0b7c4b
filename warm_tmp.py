import time, torch
torch.set_num_threads(1)
from datamodules.translation import TranslationDataModule
t=time.time()
dm=TranslationDataModule(sink=True, fertility_strategy="predicted"); dm.setup()
print("setup s", round(time.time()-t))
import statistics
f=[x for s,_,_,fe in dm.datasets['val'].items for x in fe[:-1]]
print("val predicted fertility mean", statistics.mean(f), "max", max(f))
